export const SCOPES = ["inference", "rental"] as const;
export type Scope = (typeof SCOPES)[number];
export type KeyKind = "free" | "premium";

/** Who is calling: resolved from the key on every request. */
export interface Principal {
  keyId: string;
  accountId: string;
  accountName: string;
  /** The account's role: admin accounts' keys reach /metrics and /api/v1/admin. */
  role: "user" | "admin";
  kind: KeyKind;
  scopes: readonly Scope[];
  /** `sk-apl-…abcd`, safe to log. */
  display: string;
  /** Requests per minute; 0 = no cap. */
  rpm: number;
  /** Concurrent metered requests; 0 = no cap. */
  inflight: number;
  maxActiveRentals: number;
}

/** What listings show of a key: never the secret. */
export interface KeyInfo {
  id: string;
  account: string;
  kind: KeyKind;
  name: string;
  display: string;
  scopes: Scope[];
  max_active_rentals: number;
  rpm_limit: number | null;
  inflight_limit: number | null;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
  rotated_from: string | null;
  /** "api": a key someone holds; "console": the account's console key (its secret is never shown). */
  purpose: "api" | "console";
}

export interface AccountInfo {
  id: string;
  name: string;
  role: "user" | "admin";
  balance_micros: number;
  trial_tokens_used: number;
  trial_tokens_remaining: number;
  created_at: number;
  active_keys: number;
}
