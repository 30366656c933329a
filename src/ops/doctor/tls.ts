import { X509Certificate } from "node:crypto";
import { fail, ok, plural, warn, type Check, type Probes } from "./check";

// The server certificate of [server.tls]: a local CA's certificate lives 397 days, and nothing
// renews it by itself, so doctor says so a month ahead.

export const TLS_WARN_DAYS = 30;
const DAY_MS = 86_400_000;
const RENEW = "run `appliance tls renew`, then `kill -HUP <server pid>` (or restart the server)";

export function checkTlsCert(path: string, probes: Pick<Probes, "readText">, now = Date.now()): Check {
  const name = "tls certificate";
  const pem = probes.readText(path);
  if (pem === null) return fail(name, `cannot read ${path}`, "fix server.tls.cert in the config, or run `appliance tls renew` (`appliance tls init` where there is no CA yet)");
  let x: X509Certificate;
  try {
    x = new X509Certificate(pem);
  } catch (e) {
    return fail(name, `${path} is not a PEM certificate (${(e as Error).message})`, `point server.tls.cert at the certificate, or run \`appliance tls init\``);
  }
  const until = Date.parse(x.validTo);
  const when = new Date(until).toISOString().replace(/\.\d+Z$/, "Z");
  const days = Math.floor((until - now) / DAY_MS);
  if (until <= now) return fail(name, `${path} expired on ${when}; clients refuse it`, RENEW);
  if (Date.parse(x.validFrom) > now) return fail(name, `${path} is not valid before ${x.validFrom} (is the clock right?)`, "check the system clock (timedatectl)");
  const detail = `${path} valid until ${when} (${plural(days, "day")} left)`;
  if (until - now < TLS_WARN_DAYS * DAY_MS) return warn(name, detail, RENEW);
  return ok(name, detail);
}
