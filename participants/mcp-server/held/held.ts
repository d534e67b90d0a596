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
 * ever); modern/modern-held.ts answers with it. `HeldRuns` are the held calls still running in the
 * gateway: each can be withdrawn, and is when its client leaves it (modern/modern-held.ts).
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { McpFaceSpace } from "../../../gateway/index.js";
import { AuthzContexts } from "./denials.js";

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
  /** Requests waiting for a proposal's outcome (`until`), woken when it settles. */
  private readonly waiters = new Map<string, Set<() => void>>();

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
    const woken = this.waiters.get(id);
    this.waiters.delete(id);
    for (const wake of woken ?? []) wake();
    return true;
  }

  /** Waits until proposal `id` is settled (or is no longer kept), `ms` passed, or `signal` aborted. */
  until(id: string, ms: number, signal?: AbortSignal): Promise<"settled" | "timeout" | "aborted"> {
    if (this.read(id).status !== "pending") return Promise.resolve("settled");
    return new Promise((resolve) => {
      let set = this.waiters.get(id);
      if (!set) {
        set = new Set();
        this.waiters.set(id, set);
      }
      const mine = set;
      const done = (how: "settled" | "timeout" | "aborted") => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", aborted);
        mine.delete(wake);
        if (mine.size === 0 && this.waiters.get(id) === mine) this.waiters.delete(id);
        resolve(how);
      };
      const wake = () => done("settled");
      const aborted = () => done("aborted");
      const timer = setTimeout(() => done("timeout"), ms);
      mine.add(wake);
      if (signal?.aborted) aborted();
      else signal?.addEventListener("abort", aborted, { once: true });
    });
  }

  /** Requests waiting on proposal `id` now. */
  waiting(id: string): number {
    return this.waiters.get(id)?.size ?? 0;
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
      const woken = this.waiters.get(id);
      this.waiters.delete(id);
      for (const wake of woken ?? []) wake();
    }
  }
}

/** What a held call ended with: its result, or the error the face gave. */
export type HeldEnd = { result: unknown } | { error: { code: number; message: string; data?: unknown } };

/**
 * The held calls of a mount still running in the gateway, by proposal: each can be withdrawn
 * (its inner call aborted: the face withdraws the proposal), and is when its client leaves
 * it — a request dropped while it waited, or no request again within a while after it was
 * told to ask again. Entries end when the call does.
 */
export class HeldRuns {
  private readonly runs = new Map<
    string,
    { abort: AbortController; route?: HeldRoute | undefined; abandon?: NodeJS.Timeout | undefined }
  >();
  /** Requests held open now, on the whole mount (bounded in modern/modern-held.ts). */
  holding = 0;

  add(id: string, abort: AbortController, route?: HeldRoute): void {
    this.runs.set(id, { abort, route });
  }

  /** Where the call's log lines go (logs/modern-logs.ts), re-pointed to each request that waits on it. */
  route(id: string): HeldRoute | undefined {
    return this.runs.get(id)?.route;
  }

  ended(id: string): void {
    clearTimeout(this.runs.get(id)?.abandon);
    this.runs.delete(id);
  }

  /** The client asked again: it has not left. */
  resumed(id: string): void {
    const r = this.runs.get(id);
    if (r) clearTimeout(r.abandon);
  }

  /** Answered `input_required`: a client that does not ask again within `ms` has left, and the call is withdrawn. */
  expectBack(id: string, ms: number): void {
    const r = this.runs.get(id);
    if (!r) return;
    clearTimeout(r.abandon);
    r.abandon = setTimeout(() => this.withdraw(id, `the MCP client did not ask for the result again within ${ms} ms`), ms);
    r.abandon.unref();
  }

  withdraw(id: string, reason: string): void {
    const r = this.runs.get(id);
    if (!r) return;
    clearTimeout(r.abandon);
    r.abort.abort(new Error(reason));
  }

  get size(): number {
    return this.runs.size;
  }
}

/** Where a pending proposal stands (gateway/edge/mcp-face.ts `approvalOf`): the multi-party profile's facts. */
export interface ApprovalProgress {
  required: number;
  approvedBy: string[];
  /** Who may still decide it now (ids, groups by their members), escalation stages included. */
  waitingFor: string[];
  /** The `policy.escalate` stages reached. */
  escalated: number[];
}

/** A held call's log route (logs/modern-logs.ts `LogRoute`), as held.ts needs it. */
export interface HeldRoute {
  to(log: ((level: never, data: unknown, logger?: string) => Promise<void>) | undefined): void;
}

/** What answering a held call needs: the seat, its sealed states, recorded outcomes, the calls running, and how long to hold. */
export interface HeldFace {
  space: string;
  seat: string;
  states: HeldStates;
  outcomes: HeldOutcomes<HeldEnd>;
  runs: HeldRuns;
  /** Where a person decides the proposal: a signed link for the one person who may, else its card in the console. */
  cardUrl(proposal: string): string;
  /** The console of the space, where a person signs in or decides (a structured denial's remediation). */
  consoleUrl: string;
  /** Context ids of structured denials (denials.ts), bound to the operation refused. */
  contexts: AuthzContexts;
  /** Where a pending proposal of the seat stands, for the multi-party profile (docs/mcp.md). */
  approvalOf(proposal: string): ApprovalProgress | undefined;
  /** How long a request state resumes its call. */
  ttlMs: number;
  /** How long one request is held open waiting for the decision before it answers `input_required` (within a client's own timeout). */
  legMs: number;
  /** How long after such an answer the client has to ask again before its call is withdrawn. */
  abandonMs: number;
  /** Progress while a request is held, when it asked for progress. */
  progressMs: number;
  /** SSE keep-alive comments while a request is held. */
  keepAliveMs: number;
}

/** How the held requests of a mount wait (McpHttpOptions). */
export interface HoldOptions {
  /** Default 55 000: under the MCP SDK's own 60 s request timeout, so a plain client's request is answered before it gives up. */
  legMs?: number | undefined;
  /** Default 60 000. */
  abandonMs?: number | undefined;
  /** Default 2000. */
  progressMs?: number | undefined;
  /** Default 15 000. */
  keepAliveMs?: number | undefined;
}

/** The held calls of one HTTP mount: one key, one record of outcomes, a face per request. */
export class HeldCalls {
  readonly states = new HeldStates(randomBytes(32));
  readonly contexts = new AuthzContexts();
  readonly outcomes = new HeldOutcomes<HeldEnd>();
  readonly runs = new HeldRuns();
  private readonly hold: Required<{ [K in keyof HoldOptions]: number }>;

  constructor(opts: HoldOptions = {}) {
    this.hold = {
      legMs: opts.legMs ?? 55_000,
      abandonMs: opts.abandonMs ?? 60_000,
      progressMs: opts.progressMs ?? 2000,
      keepAliveMs: opts.keepAliveMs ?? 15_000,
    };
  }

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
    return {
      space: space.id,
      seat,
      states: this.states,
      outcomes: this.outcomes,
      runs: this.runs,
      cardUrl,
      consoleUrl: `${origin}/ui/#space=${encodeURIComponent(space.id)}`,
      contexts: this.contexts,
      approvalOf: (id) => space.approvalOf(id, seat),
      ttlMs,
      ...this.hold,
    };
  }
}
