/**
 * The fuzzer's frames: a valid envelope of every kind the gateway handles (space/kinds.ts
 * ROUTES, MEW's join frames, kinds nobody handles), then mutated the way a hostile or
 * broken client would — fields dropped, duplicated or of the wrong type, huge strings,
 * control and bidi characters, nesting 100 to 100,000 deep, numbers at the edges, ids that
 * collide with pending ones, prototype-ish names, other participants' proposals.
 *
 * Everything is drawn from one seeded generator (`seeded` in ../helpers.ts, mulberry32),
 * so a seed names the same frames on every machine. A frame is the exact text (or bytes)
 * put on the socket: deep nesting is spliced into the text, never built as an object, so
 * the fuzzer itself never recurses 100,000 deep.
 */
import { seeded } from "../helpers.js";

/** One frame as it goes on the wire. */
export type Frame = { text: string } | { bytes: Buffer; binary: boolean };

/** The names and ids of the fuzz space that frames aim at (see harness.ts). */
export interface Target {
  space: string;
  /** The fuzzed member itself. */
  me: string;
  /** Everyone else in the space. */
  others: readonly string[];
  /** The tool owner and its tools. */
  owner: string;
  tools: readonly string[];
  /** Pending proposals: the fuzzed member's own and another participant's. */
  ownProposal: string;
  otherProposal: string;
  /** Tokens a join frame may name: the member's own, and another participant's. */
  myToken: string;
  otherToken: string;
}

export class Rng {
  private readonly next: () => number;
  constructor(seed: number) {
    this.next = seeded(seed);
  }
  float(): number {
    return this.next();
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
}

// --- values ---------------------------------------------------------------------------------

/** A value spliced into the text in place of its placeholder: nesting `depth` deep. */
class Deep {
  constructor(
    readonly depth: number,
    readonly shape: "array" | "object" | "mixed",
  ) {}
  text(): string {
    const d = this.depth;
    if (this.shape === "array") return "[".repeat(d) + "]".repeat(d);
    if (this.shape === "object") return `${'{"a":'.repeat(d)}1${"}".repeat(d)}`;
    return `${'[{"a":'.repeat(d / 2)}0${"}]".repeat(d / 2)}`;
  }
}

const DEPTHS = [100, 1_000, 10_000, 100_000];
const EDGE_NUMBERS: unknown[] = [
  0,
  -0,
  1e308,
  -1e308,
  5e-324,
  2 ** 53 + 1,
  -(2 ** 31),
  2 ** 32,
  0.1 + 0.2,
  "NaN",
  "Infinity",
  "-0",
  "1e999",
  "0x10",
  "",
];
const WEIRD_STRINGS = [
  "\u0000",
  "\u0007\u001b[31mred\u001b[0m\r\n",
  "\u202egnp.exe",
  "\u2066isolate\u2069\u200b\u200d",
  "\ud800",
  "\udfff\ud800",
  "🙂".repeat(40),
  "../../etc/passwd",
  "${HOME}",
  "%s%n%x",
  " ",
  "a".repeat(257),
];
const PROTO_NAMES = ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf", "prototype", "__defineGetter__"];

function weirdScalar(r: Rng): unknown {
  switch (r.int(7)) {
    case 0:
      return null;
    case 1:
      return r.pick([true, false]);
    case 2:
      return r.pick(EDGE_NUMBERS);
    case 3:
      return r.pick(WEIRD_STRINGS);
    case 4:
      return r.pick(PROTO_NAMES);
    case 5:
      return [];
    default:
      return {};
  }
}

function hugeString(r: Rng): string {
  // Under the frame limit, just over it (payload_too_large), and over 4x (the socket closes).
  const n = r.pick([10_000, 300_000, 1_100_000, r.chance(0.05) ? 4_500_000 : 50_000]);
  return r.pick(["x", "\u202e", "\u0000", "é"]).repeat(n);
}

/** A value of any sort, hostile more often than not. */
function anyValue(r: Rng, t: Target): unknown {
  switch (r.int(8)) {
    case 0:
      return new Deep(r.pick(DEPTHS), r.pick(["array", "object", "mixed"] as const));
    case 1:
      return hugeString(r);
    case 2:
      return r.pick([t.ownProposal, t.otherProposal, t.me, ...t.others, "system:gateway"]);
    case 3:
      return Array.from({ length: r.pick([0, 1, 65, 300]) }, () => r.pick([t.me, ...t.others, "x"]));
    case 4:
      return JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}') as unknown;
    default:
      return weirdScalar(r);
  }
}

// --- valid envelopes of every kind ----------------------------------------------------------

type Obj = Record<string, unknown>;

const KINDS = [
  "mcp/request",
  "mcp/request/gateway",
  "mcp/response",
  "mcp/proposal",
  "mcp/approve",
  "mcp/reject",
  "mcp/withdraw",
  "capability/grant",
  "capability/revoke",
  "space/invite",
  "space/kick",
  "space/takeover",
  "space/disable",
  "space/enable",
  "stream/request",
  "stream/close",
  "stream/grant-write",
  "stream/revoke-write",
  "stream/transfer-ownership",
  "chat",
  "join",
  "system/join",
  "unknown",
] as const;

function toolCall(r: Rng, t: Target, viaGateway: boolean): Obj {
  const tool = r.pick(t.tools);
  return {
    jsonrpc: "2.0",
    id: r.pick([1, "1", `rpc-${r.int(1000)}`]),
    method: "tools/call",
    params: { name: viaGateway ? `${t.owner}/${tool}` : tool, arguments: { path: "/tmp/x" } },
  };
}

/** A well-formed envelope of one kind, addressed at the fuzz space's names. */
export function validEnvelope(r: Rng, t: Target, kind: (typeof KINDS)[number]): Obj {
  const id = `fz-${r.int(1_000_000)}`;
  const someone = r.pick(t.others);
  const proposal = r.pick([t.ownProposal, t.otherProposal]);
  const stream = `stream-${1 + r.int(3)}`;
  switch (kind) {
    case "mcp/request":
      return {
        id,
        kind,
        to: [t.owner],
        payload: r.chance(0.7)
          ? toolCall(r, t, false)
          : { jsonrpc: "2.0", id: 2, method: r.pick(["tools/list", "resources/list", "notifications/progress", "ping"]), params: {} },
      };
    case "mcp/request/gateway":
      return {
        id,
        kind: "mcp/request",
        to: ["system:gateway"],
        payload: r.chance(0.7) ? toolCall(r, t, true) : { jsonrpc: "2.0", id: 3, method: "tools/list" },
      };
    case "mcp/response":
      return {
        id,
        kind,
        to: [someone],
        correlation_id: [r.pick([proposal, "gw-call-1", id])],
        payload: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "done" }] } },
      };
    case "mcp/proposal":
      return {
        id,
        kind,
        to: [t.owner],
        payload: { method: "tools/call", params: { name: r.pick(t.tools), arguments: { path: "/tmp/x" } } },
      };
    case "mcp/approve":
      return { id, kind, correlation_id: [proposal], payload: { scope: r.pick(["once", "always"]), arguments: { path: "/etc/shadow" } } };
    case "mcp/reject":
      return { id, kind, correlation_id: [proposal], payload: { reason: "disagree", text: "no" } };
    case "mcp/withdraw":
      return { id, kind, correlation_id: [proposal], payload: { reason: "changed my mind" } };
    case "capability/grant":
      return {
        id,
        kind,
        payload: {
          recipient: r.pick([t.me, ...t.others]),
          capabilities: [
            r.pick([
              { kind: "chat" },
              { kind: "*" },
              { kind: "mcp/request", payload: { method: "tools/call", params: { name: r.pick(t.tools) } } },
            ]),
          ],
        },
      };
    case "capability/revoke":
      return {
        id,
        kind,
        payload: r.chance(0.5) ? { recipient: someone, grant_id: "grant-1" } : { recipient: t.me, capabilities: [{ kind: "chat" }] },
      };
    case "space/invite":
      return {
        id,
        kind,
        payload: { participant_id: `puppet-${r.int(5)}`, initial_capabilities: [{ kind: r.pick(["chat", "mcp/request", "*"]) }] },
      };
    case "space/kick":
      return { id, kind, payload: { participant_id: someone, reason: "bye" } };
    case "space/takeover":
      return { id, kind, payload: { human: someone, call: proposal } };
    case "space/disable":
    case "space/enable":
      return { id, kind, payload: { participant_id: r.pick([t.owner, someone]), reason: "fuzz" } };
    case "stream/request":
      return {
        id,
        kind,
        to: ["gateway"],
        payload: { direction: "upload", description: "logs", encoding: r.pick(["text", "binary"]), target: [someone] },
      };
    case "stream/close":
      return { id, kind, payload: { stream_id: stream, reason: "done" } };
    case "stream/grant-write":
    case "stream/revoke-write":
      return { id, kind, payload: { stream_id: stream, participant_id: someone } };
    case "stream/transfer-ownership":
      return { id, kind, payload: { stream_id: stream, new_owner: someone } };
    case "chat":
      return { id, kind, ...(r.chance(0.3) ? { to: [someone] } : {}), payload: { text: "hello", format: "plain" } };
    case "join":
      return { type: "join", space: t.space, token: r.pick([t.myToken, t.otherToken]), participantId: r.pick([t.me, someone]) };
    case "system/join":
      return { kind, payload: { space: t.space, token: r.pick([t.myToken, t.otherToken]), participant_id: r.pick([t.me, someone]) } };
    default:
      return {
        id,
        kind: r.pick([
          "x-custom/thing",
          "reasoning/thought",
          "participant/status",
          "system/welcome",
          "system/error",
          "constructor",
          "__proto__",
          "chat/typing",
        ]),
        payload: { any: "thing" },
      };
  }
}

// --- mutation -------------------------------------------------------------------------------

const TOP_FIELDS = ["protocol", "id", "ts", "from", "to", "kind", "correlation_id", "context", "payload"];

/** A path to an object inside `env` (the envelope itself, its payload, params, ...). */
function someObject(r: Rng, env: Obj): Obj {
  let at: Obj = env;
  for (let i = 0; i < 4; i++) {
    const inner = Object.values(at).filter((v): v is Obj => typeof v === "object" && v !== null && !(v instanceof Deep));
    if (inner.length === 0 || r.chance(0.35)) break;
    at = r.pick(inner);
  }
  return at;
}

function mutateOnce(r: Rng, t: Target, env: Obj): void {
  const at = someObject(r, env);
  const keys = Object.keys(at);
  const key = keys.length ? r.pick(keys) : r.pick(TOP_FIELDS);
  switch (r.int(13)) {
    case 0:
      delete at[key];
      return;
    case 1:
      at[key] = weirdScalar(r);
      return;
    case 2:
    case 12:
      at[key] = new Deep(r.pick(DEPTHS), r.pick(["array", "object", "mixed"] as const));
      return;
    case 3:
      at[key] = hugeString(r);
      return;
    case 4:
      at[key] = anyValue(r, t);
      return;
    case 5:
      // `to` naming nobody, a prototype-ish name, the gateway, or everyone a hundred times.
      env["to"] = r.pick([
        [r.pick(PROTO_NAMES)],
        ["nobody"],
        ["system:gateway"],
        [t.me],
        ["gateway", r.pick(PROTO_NAMES)],
        Array(257).fill(t.owner),
        [""],
        "tools",
      ]);
      return;
    case 6:
      // Correlation with someone else's proposal, a pending id, or a shape MEW never sends.
      env["correlation_id"] = r.pick([
        [t.otherProposal],
        t.otherProposal,
        [t.ownProposal, t.otherProposal],
        Array(65).fill(t.otherProposal),
        [r.pick(PROTO_NAMES)],
        [1],
        null,
      ]);
      return;
    case 7:
      // An id colliding with a pending proposal, or another frame's.
      env["id"] = r.pick([t.ownProposal, t.otherProposal, "fz-1", r.pick(PROTO_NAMES), "", "x".repeat(257)]);
      return;
    case 8:
      env["from"] = r.pick([...t.others, "system:gateway", t.me.toUpperCase(), `${t.me}\u0000`]);
      return;
    case 9:
      env["kind"] = r.pick([
        ...KINDS.filter((k) => !k.includes("gateway") && k !== "join" && k !== "unknown"),
        "system/presence",
        "Chat",
        "chat ",
        "mcp/approve/",
        r.pick(PROTO_NAMES),
        "x".repeat(129),
        "/chat",
      ]);
      return;
    case 10:
      at[r.pick(["__proto__", "constructor", "prototype"])] = { polluted: true, kind: "mcp/approve" };
      return;
    default:
      at[key] = r.pick(WEIRD_STRINGS) + String(at[key] ?? "");
  }
}

/** JSON text of `value`, with every Deep spliced in; `dupes` adds a repeated key at the top. */
function render(value: Obj, dupe?: [string, unknown]): string {
  const deep: Deep[] = [];
  let text = JSON.stringify(value, (_k, v: unknown) => {
    if (v instanceof Deep) {
      deep.push(v);
      return `\u0001DEEP${deep.length - 1}\u0001`;
    }
    return v;
  });
  deep.forEach((d, i) => {
    text = text.replace(JSON.stringify(`\u0001DEEP${i}\u0001`), () => d.text());
  });
  // A repeated key: JSON.parse keeps the last one, other readers may keep the first.
  if (dupe && text.endsWith("}") && text.length > 2) text = `${text.slice(0, -1)},${JSON.stringify(dupe[0])}:${JSON.stringify(dupe[1])}}`;
  return text;
}

/** Frames that are not envelopes at all. */
function rawFrame(r: Rng, t: Target): Frame {
  switch (r.int(8)) {
    case 0:
      return { text: r.pick(["", "null", "[]", "1", '"chat"', "{", '{"kind":', "{}", "true", "\u0000"]) };
    case 1:
      return { text: "[".repeat(r.pick(DEPTHS)) };
    case 2:
      return { text: `#stream-${1 + r.int(3)}#${r.pick(["data", "\u202e", "x".repeat(1000)])}` };
    case 3:
      return { bytes: Buffer.from(`#stream-1#${"b".repeat(r.int(100))}`), binary: true };
    case 4:
      // Text frames that are not UTF-8 (the socket closes with 1007).
      return { bytes: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), binary: false };
    case 5:
      return { text: `{"kind":"chat","payload":{"text":"a"},"kind":"mcp/approve","correlation_id":["${t.otherProposal}"]}` };
    case 6:
      return { text: `{"kind":"chat","payload":${"[".repeat(5000)}` };
    default:
      return { bytes: Buffer.alloc(r.int(64), r.int(256)), binary: true };
  }
}

/** One well-formed frame that changes durable state, so that what follows waits behind its write. */
export function writerFrame(r: Rng, t: Target): Frame {
  return { text: JSON.stringify(validEnvelope(r, t, "mcp/proposal")) };
}

const KEPT = ["chat", "stream/request", "unknown", "mcp/proposal", "capability/grant", "space/invite", "mcp/response"] as const;

/** A well-formed envelope of some kind with its payload, or one field of it, nested deep. */
function deepFrame(r: Rng, t: Target): Frame {
  // Half of them of a kind that is stored, registered or delivered as it came: where depth once hurt.
  const env = validEnvelope(r, t, r.chance(0.5) ? r.pick(KEPT) : r.pick(KINDS));
  const deep = new Deep(r.pick(DEPTHS), r.pick(["array", "object", "mixed"] as const));
  const payload = env["payload"];
  if (typeof payload === "object" && payload !== null && r.chance(0.7)) {
    const fields = Object.keys(payload);
    (payload as Obj)[r.chance(0.8) && fields.length ? r.pick(fields) : r.pick(["extra", "description", "params"])] = deep;
  } else env["payload"] = deep;
  return { text: render(env) };
}

/** One fuzzed frame. */
export function fuzzFrame(r: Rng, t: Target): Frame {
  if (r.chance(0.1)) return rawFrame(r, t);
  if (r.chance(0.12)) return deepFrame(r, t);
  const env = validEnvelope(r, t, r.pick(KINDS));
  // A few frames go out valid: the baseline the mutations are measured against.
  const n = r.chance(0.1) ? 0 : 1 + r.int(3);
  for (let i = 0; i < n; i++) mutateOnce(r, t, env);
  const dupe: [string, unknown] | undefined = r.chance(0.08) ? [r.pick(TOP_FIELDS), anyValue(r, t)] : undefined;
  return { text: render(env, dupe) };
}

/**
 * A batch of `n` frames for seed `seed`, batch number `b`. About one frame in four is sent
 * right behind a proposal, so that it is handled from the backlog, after the write.
 */
export function batch(seed: number, b: number, n: number, t: Target): Frame[] {
  const r = new Rng((seed * 7919 + b * 104729) | 0);
  const out: Frame[] = [];
  while (out.length < n) {
    if (r.chance(0.25)) out.push(writerFrame(r, t));
    out.push(fuzzFrame(r, t));
  }
  return out;
}

/** The frame as one readable line, cut to `max` characters (with its full length). */
export function describe(f: Frame, max = 600): string {
  const text = "text" in f ? f.text : `<${f.binary ? "binary" : "text"} bytes ${f.bytes.toString("hex").slice(0, 200)}>`;
  const shown = text.length > max ? `${text.slice(0, max / 2)} …[${text.length - max} more chars]… ${text.slice(-max / 2)}` : text;
  // Control and bidi characters escaped, so the report itself is safe to print.
  return shown.replace(
    /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
