import { unixSeconds as seconds } from "../../lib/clock";
import type { RentalRow } from "../../4-store/rentals";
import { fromMicros } from "../billing/minutes";
import type { LaunchHandle } from "./launchers/types";

// A rental as the API shows it (spec §2.3): money in dollars, times in Unix seconds, and its
// connection (URL and token) while it runs.

export type RentalObject = ReturnType<typeof rentalObject>;

/** `publicBase`: the appliance's public base URL, which a proxied rental's connection URL starts with. */
export function rentalObject(r: RentalRow, publicBase: string) {
  const handle = r.handle ? (JSON.parse(r.handle) as LaunchHandle) : null;
  return {
    rental_id: r.id,
    object: "rental" as const,
    node_id: r.node_id,
    type: r.type,
    status: r.status,
    stop_reason: r.stop_reason,
    failure: r.failure,
    connection: r.status === "running" && handle ? { url: `${handle.proxy ? `${publicBase}${handle.proxy.basePath}` : handle.url}?token=${r.token}`, token: r.token } : null,
    hours: r.hours,
    price_per_hour: fromMicros(r.price_per_hour_micros),
    billed_minutes: r.billed_minutes,
    cost: fromMicros(r.cost_micros),
    created_at: seconds(r.created_at),
    running_at: seconds(r.running_at),
    stopped_at: seconds(r.stopped_at),
    expires_at: seconds(r.expires_at),
  };
}
