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
 * `HeldCalls` is what one HTTP mount keeps (its key lives as long as the process: after a
 * restart a state resumes nothing, and the call's proposal is decided in the space as
 * ever); modern.ts answers with it.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { McpFaceSpace } from "../../gateway/index.js";

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

  /** Whether `state` claims to be one of ours (its version prefix): only such a state is opened; any other is a server's. */
  isOurs(state: unknown): boolean {
    return typeof state === "string" && state.startsWith(`${VERSION}.`);
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
    if (given.length !== want.length || !timingSafeEqual(given, want))
      return bad("the request state was changed or is not one this gateway made");
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
  return (
    typeof c["s"] === "string" &&
    typeof c["w"] === "string" &&
    typeof c["p"] === "string" &&
    typeof c["t"] === "string" &&
    typeof c["e"] === "number" &&
    Number.isFinite(c["e"])
  );
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

/** What a held call ended with: its result, or the error the face gave. */
export type HeldEnd = { result: unknown } | { error: { code: number; message: string; data?: unknown } };

/** What answering a held call with `input_required` needs: the seat, its sealed states and recorded outcomes. */
export interface HeldFace {
  space: string;
  seat: string;
  states: HeldStates;
  outcomes: HeldOutcomes<HeldEnd>;
  /** Where a person decides the proposal: a signed link for the one person who may, else its card in the console. */
  cardUrl(proposal: string): string;
  /** How long a request state resumes its call. */
  ttlMs: number;
}

/** The held calls of one HTTP mount: one key, one record of outcomes, a face per request. */
export class HeldCalls {
  readonly states = new HeldStates(randomBytes(32));
  readonly outcomes = new HeldOutcomes<HeldEnd>();

  /** For a request of `seat` in `space`; the card's URL on the host the client reached. */
  face(req: IncomingMessage, space: McpFaceSpace, seat: string): HeldFace {
    const origin = `http://${String(req.headers.host ?? "127.0.0.1").replace(/[^\w.:[\]-]/g, "")}`;
    // The one person who may decide it gets a signed link to its page (gateway/proposals/links.ts: their own
    // session decides, once); else the console opens at the card for whoever signs in.
    const cardUrl = (id: string) => {
      const link = space.linkForOnePerson(id);
      if (link !== undefined) return `${origin}/ui/link.html#t=${link}`;
      return `${origin}/ui/#space=${encodeURIComponent(space.id)}&proposal=${encodeURIComponent(id)}`;
    };
    // A state outlives the proposal a little: a resumed request after an expiry reads the expiry.
    const ttlMs = space.proposalTtlMs + 60 * 60_000;
    return { space: space.id, seat, states: this.states, outcomes: this.outcomes, cardUrl, ttlMs };
  }
}
