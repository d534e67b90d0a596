/**
 * What the space's MCP face says about itself: its instructions, the server it stands for
 * when it serves one participant as itself (`/mcp/<participant>`, `mewgate mcp --only`),
 * and progress toward one MCP request.
 *
 * server.ts builds the SDK `Server` from these.
 */
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import {
  ImplementationSchema,
  ServerCapabilitiesSchema,
  type Implementation,
  type ProgressToken,
  type ServerCapabilities,
  type ServerNotification,
  type ServerRequest,
} from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import { stripHidden } from "../../../gateway/index.js";
import type { ParticipantClient } from "../../client.js";
import { ParticipantError } from "../../errors.js";

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/**
 * One participant served as itself: its tools, resources, templates, prompts and
 * completions under its own names, and nobody else's. What its MCP server said when the
 * bridge initialised it (asked through the gateway, as the connecting participant) gives
 * the name, version, capabilities and instructions the MCP client sees.
 */
export interface OnlyParticipant {
  participant: string;
  serverInfo?: Implementation | undefined;
  capabilities?: ServerCapabilities | undefined;
  instructions?: string | undefined;
}

/** Longest instructions passed on from a server (a model reads them). */
const MAX_INSTRUCTIONS = 8000;

/**
 * Asks `participant` (through the gateway, as this client, so capability rules apply) what
 * its MCP server answered to `initialize`. Throws a `ParticipantError` when it is not in the
 * space or does not answer; a participant that is not a bridged server (no `initialize`
 * answer) is described by its id alone.
 */
export async function describeParticipant(client: ParticipantClient, participant: string, timeoutMs = 10_000): Promise<OnlyParticipant> {
  let res: unknown;
  try {
    res = await client.request(participant, "initialize", {}, { timeoutMs });
  } catch (err) {
    // Not a bridged server (no initialize to answer), or a seat whose capabilities do not
    // reach past tools: served by its id, with the space's whole set of capabilities.
    if (err instanceof ParticipantError && (err.code === "rpc_error" || err.code === "capability_violation" || err.code === "denied"))
      return { participant };
    throw err;
  }
  const r = typeof res === "object" && res !== null ? (res as Record<string, unknown>) : {};
  const info = ImplementationSchema.safeParse(r["serverInfo"]);
  const caps = ServerCapabilitiesSchema.safeParse(r["capabilities"] ?? {});
  const instructions = typeof r["instructions"] === "string" ? stripHidden(r["instructions"]).slice(0, MAX_INSTRUCTIONS) : undefined;
  return {
    participant,
    serverInfo: info.success ? info.data : undefined,
    capabilities: caps.success ? caps.data : undefined,
    instructions,
  };
}

/** The capabilities the face declares: the whole set for the space, the server's own for one participant. */
export function faceCapabilities(only: OnlyParticipant | undefined): ServerCapabilities {
  const all: ServerCapabilities = {
    tools: { listChanged: true },
    resources: { subscribe: true, listChanged: true },
    prompts: { listChanged: true },
    completions: {},
    logging: {},
  };
  if (!only?.capabilities) return all;
  const own = only.capabilities;
  // Tools and logging always: the tool list may be empty, and the face's own log lines (waits, approvals) are worth hearing.
  return {
    tools: { listChanged: true },
    logging: {},
    ...(own.resources ? { resources: { subscribe: own.resources.subscribe === true, listChanged: true } } : {}),
    ...(own.prompts ? { prompts: { listChanged: true } } : {}),
    ...(own.completions ? { completions: {} } : {}),
  };
}

/**
 * The face's instructions. Serving one participant as itself, a server that gave none gets
 * none (as the client would see it directly); one that gave some gets a line after them
 * saying it is reached through the space and that some calls wait for approval.
 */
export function instructions(space: string | undefined, participant: string | undefined, only?: OnlyParticipant): string | undefined {
  const where = space ? `the mewgate space "${space}"${participant ? ` as participant "${participant}"` : ""}` : "a mewgate space";
  const approval =
    `Some calls wait until someone in the space approves them; ` +
    `a rejection comes back as an error result with the reason: do not retry it unchanged.`;
  if (only) {
    if (!only.instructions) return undefined;
    const own = `${only.instructions}\n\n`;
    const name = only.serverInfo?.title ?? only.serverInfo?.name ?? only.participant;
    return `${own}This is the MCP server "${stripHidden(name).slice(0, 200)}" (participant "${only.participant}"), reached through ${where}. ${approval}`;
  }
  return (
    `These tools are the tools of ${where}, a shared workspace of people, agents and tool servers. ` +
    `The space calls each tool participant/tool; here it is named participant__tool, and its title shows the real name. ` +
    `Tools whose title says "needs approval" wait until someone in the space approves the call; ` +
    `a rejection comes back as an error result with the reason: do not retry it unchanged.`
  );
}

/**
 * Progress toward one MCP request. MCP wants the numbers to increase: the ticks sent while
 * waiting for approval count 1, 2, 3…, and the tool's own progress is shifted past them.
 * A call that did not wait passes the tool's numbers as they are, its first (often 0)
 * included; after a wait, a number the ticks already reached is not sent again.
 */
export class ProgressRelay {
  private ticks = 0;
  private last = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly token: ProgressToken,
    private readonly extra: Extra,
    private readonly log: Logger | undefined,
  ) {}

  tick(message: string): void {
    this.ticks++;
    this.emit(this.ticks, undefined, message);
  }

  /** The tool owner's progress, forwarded. */
  forward(p: { progress?: number; total?: number; message?: string }): void {
    if (typeof p.progress !== "number") return;
    this.emit(this.ticks + p.progress, typeof p.total === "number" ? this.ticks + p.total : undefined, p.message);
  }

  private emit(progress: number, total: number | undefined, message: string | undefined): void {
    if (!(progress > this.last) || this.extra.signal.aborted) return;
    this.last = progress;
    const params = {
      progressToken: this.token,
      progress,
      ...(total === undefined ? {} : { total }),
      ...(message === undefined ? {} : { message }),
    };
    this.extra
      .sendNotification({ method: "notifications/progress", params })
      .catch((err: Error) => this.log?.debug({ err: err.message }, "could not send progress"));
  }
}

/** Most `_meta` keys of a client's request passed on, and the most bytes they may take. */
const MAX_META_KEYS = 32;
const MAX_META_BYTES = 8192;

/**
 * The client's own `_meta` of a request, as it goes on to the server: its trace context
 * (`traceparent`, `tracestate`) and its other keys, but not `progressToken` (the face
 * relays progress with a token of its own) nor anything under `mewgate/`, which is the
 * gateway's to say (a client cannot forge who a form is for or how long a call may take).
 * A `_meta` too large or of too many keys is not passed at all.
 */
export function forwardedMeta(meta: unknown): Record<string, unknown> | undefined {
  if (typeof meta !== "object" || meta === null || Array.isArray(meta)) return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(meta as Record<string, unknown>)) {
    if (k === "progressToken" || k.toLowerCase().startsWith("mewgate/") || v === undefined) continue;
    out[k] = v;
  }
  const keys = Object.keys(out);
  if (keys.length === 0 || keys.length > MAX_META_KEYS || Buffer.byteLength(JSON.stringify(out)) > MAX_META_BYTES) return undefined;
  return out;
}

/** What the face declares: tasks for `tools/call`, listed and cancellable. */
export const TASK_CAPABILITY = { list: {}, cancel: {}, requests: { tools: { call: {} } } };

/**
 * The tools as a client that declared task support sees them: a call that waits for a
 * person may be made as a task (`execution.taskSupport: "optional"`, unless its server asks
 * for more). Other clients get the list as it is.
 */
export function withTaskSupport<
  T extends { execution?: { taskSupport?: string | undefined } | undefined; _meta?: Record<string, unknown> | undefined },
>(tools: T[], client: { tasks?: unknown } | undefined): T[] {
  if (client?.tasks === undefined) return tools;
  return tools.map((t) =>
    t._meta?.["mewgate/policy"] === "proposal" && t.execution?.taskSupport !== "required"
      ? { ...t, execution: { ...t.execution, taskSupport: "optional" } }
      : t,
  );
}
