/**
 * The request state of a held call at MCP 2026-07-28 (issue 38, item 2): a tools/call that
 * waits for a person answers `input_required` with request state that resumes it once the
 * proposal is decided. The state is the client's to keep and send back, so it is sealed:
 * HMAC-SHA256 under a key the gateway holds, over the space, the seat (the participant the
 * face acts as), the proposal id, the tool and an expiry. A state that was changed, made for
 * another seat or space, or expired resumes nothing.
 *
 * `HeldOutcomes` keeps what each held call ended with, by proposal, so that a resumed
 * request after the decision answers the one recorded result however often it is replayed:
 * the call runs once, when it is approved, never again because a state came back.
 *
 * Not yet wired into modern.ts: the face still waits in the request (see modern.ts).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** What a sealed state says. Short keys: it travels in every resumed request. */
export interface HeldClaims {
  /** space */
  s: string;
  /** seat: the participant the face acts as */
  w: string;
  /** proposal id */
  p: string;
  /** the tool called (its real name) */
  t: string;
  /** expiry, ms since the epoch */
  e: number;
}

export type HeldOpen = { ok: true; claims: HeldClaims } | { ok: false; message: string };

const VERSION = "h1";
/** Longest state accepted: anything longer is not one of ours, and is not parsed. */
const MAX_STATE = 4096;

export class HeldStates {
  constructor(private readonly key: Buffer) {
    if (key.length < 32) throw new Error("the key of held-call states is shorter than 32 bytes");
  }

  seal(claims: HeldClaims): string {
    const body = Buffer.from(JSON.stringify(claims), "utf8").toString("base64url");
    return `${VERSION}.${body}.${this.mac(`${VERSION}.${body}`)}`;
  }

  /** Opens `state` for the seat `seat` of space `space`; what fails says why, in words a client can show. */
  open(state: unknown, space: string, seat: string, now = Date.now()): HeldOpen {
    const bad = (message: string): HeldOpen => ({ ok: false, message });
    if (typeof state !== "string") return bad("the request state of a held call must be a string");
    if (state.length > MAX_STATE) return bad("the request state is not one this gateway made");
    const parts = state.split(".");
    if (parts.length !== 3 || parts[0] !== VERSION) return bad("the request state is not one this gateway made");
    const given = Buffer.from(parts[2]!, "utf8");
    const want = Buffer.from(this.mac(`${parts[0]}.${parts[1]}`), "utf8");
    if (given.length !== want.length || !timingSafeEqual(given, want)) return bad("the request state was changed or is not one this gateway made");
    let claims: unknown;
    try {
      claims = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8"));
    } catch {
      return bad("the request state is not one this gateway made");
    }
    if (!isClaims(claims)) return bad("the request state is not one this gateway made");
    if (claims.s !== space || claims.w !== seat) return bad("the request state was made for another seat; it resumes nothing here");
    if (claims.e <= now) return bad(`the request state expired; the proposal ${claims.p} may still be decided in the space`);
    return { ok: true, claims };
  }

  private mac(text: string): string {
    return createHmac("sha256", this.key).update(text).digest("base64url");
  }
}

function isClaims(v: unknown): v is HeldClaims {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const c = v as Record<string, unknown>;
  return typeof c["s"] === "string" && typeof c["w"] === "string" && typeof c["p"] === "string" && typeof c["t"] === "string" && typeof c["e"] === "number" && Number.isFinite(c["e"]);
}

export type HeldOutcome<R> = { status: "pending" } | { status: "done"; result: R } | { status: "unknown" };

/**
 * What held calls ended with, by proposal id: pending until decided, then the one result,
 * answered to every resumed request that names it. Bounded: past `max` entries the oldest
 * settled ones are forgotten (a replay of those answers "unknown", never a second run).
 */
export class HeldOutcomes<R> {
  private readonly entries = new Map<string, HeldOutcome<R>>();

  constructor(private readonly max = 10_000) {}

  /** A call became proposal `id` and waits. A proposal already known keeps what it has. */
  hold(id: string): void {
    if (!this.entries.has(id)) this.entries.set(id, { status: "pending" });
    this.trim();
  }

  /** Proposal `id` was decided and the call ended with `result`; only the first settling counts. */
  settle(id: string, result: R): boolean {
    const had = this.entries.get(id);
    if (had?.status === "done") return false;
    this.entries.set(id, { status: "done", result });
    this.trim();
    return true;
  }

  read(id: string): HeldOutcome<R> {
    return this.entries.get(id) ?? { status: "unknown" };
  }

  get size(): number {
    return this.entries.size;
  }

  private trim(): void {
    if (this.entries.size <= this.max) return;
    for (const [id, o] of this.entries) {
      if (this.entries.size <= this.max) break;
      if (o.status === "done") this.entries.delete(id);
    }
    // All pending: the oldest waits no more here (its replay says unknown; nothing runs twice).
    for (const id of this.entries.keys()) {
      if (this.entries.size <= this.max) break;
      this.entries.delete(id);
    }
  }
}
