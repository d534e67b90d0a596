/**
 * The space as one MCP server: its tools are the space's tools, each call goes through
 * `system:gateway` as this participant, so the space's policy applies to it unchanged.
 *
 * One `SpaceMcpServer` serves one MCP connection (an SDK `Server` connects to exactly one
 * transport); several may share one `ParticipantClient` (the HTTP endpoint does that for
 * several sessions of the same participant).
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import {
  CallToolRequestSchema,
  CallToolResultSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  RootsListChangedNotificationSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  type CallToolRequest,
  type CallToolResult,
  CreateTaskResultSchema,
  type CreateTaskResult,
  type ServerNotification,
  type ServerRequest,
} from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import { GATEWAY_ID, TASK_TTL_META_KEY, type Envelope } from "../../../gateway/index.js";
import { ParticipantClient, type ClientOptions } from "../../client.js";
import { ParticipantError, RpcError } from "../../errors.js";
import { failureResult, type Catalogue } from "../tools/catalogue.js";
import { askClient, deskOf, type Desk, type Session } from "../held/callbacks.js";
import { isInputRequired, retryParams, serverError, TAKES_INPUT } from "../held/input.js";
import { SpaceResources } from "./resources.js";
import {
  faceCapabilities,
  forwardedMeta,
  instructions,
  ProgressRelay,
  TASK_CAPABILITY,
  withTaskSupport,
  type OnlyParticipant,
} from "./face.js";
import { tasksOf, type SeatTasks } from "../tasks/tasks.js";
import { DEFAULT_TTL_MS } from "../tasks/server-task.js";
import { askUnknownTool, ownToolsPage } from "../tools/own-pages.js";
import { CLIENT_CAPS_KEY, offeredCapabilities } from "./client-caps.js";
import { SessionLog } from "../logs/session-log.js";
import { SessionTools } from "../tools/session-tools.js";
import { serveReads } from "./read-handlers.js";
import { requestOf, traced, type FaceTrace } from "./face-trace.js";

/** Reported as `serverInfo.version`; kept in step with package.json by hand. */
const SERVER_VERSION = "0.1.0";
const DEFAULT_APPROVAL_PROGRESS_MS = 2000;
/** How long a call made as a task may wait, at most: the longest timer Node keeps. */
const TASK_WAIT_MS = 2_147_483_647;

export interface SpaceMcpServerOptions {
  /**
   * The participant the MCP client acts as: a `ParticipantClient` (connected, or connected
   * on first use; its owner closes it), or the options to create one, which the server
   * then owns and closes with itself.
   */
  client: ParticipantClient | ClientOptions;
  /** `serverInfo.name`. Default `mewgate-<space>` (or `mewgate` before the client's first welcome). */
  name?: string | undefined;
  logger?: Logger | undefined;
  /**
   * While a call waits for approval, a `notifications/progress` goes to the MCP client this
   * often (when the request carried a `progressToken`). Default 2000.
   */
  approvalProgressMs?: number | undefined;
  /**
   * Serve this one participant as itself (`/mcp/<participant>`, `mewgate mcp --only`): its
   * tools, resources, templates, prompts and completions under its own names, nobody
   * else's, and its own server name and instructions (face.ts `describeParticipant`).
   */
  only?: OnlyParticipant | undefined;
  /** Most tasks the seat holds at once (tasks/tasks.ts); default 1000. */
  maxTasks?: number | undefined;
  /** A span for each tool call served, when the space exports traces (face-trace.ts). */
  trace?: FaceTrace | undefined;
  /** The client speaks 2026-07-28 (modern/modern.ts): a server's `input_required` comes back to it as it came (held/input.ts). */
  takesInput?: boolean | undefined;
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/**
 * An MCP SDK low-level `Server` whose `tools/list` is the space's tools and whose
 * `tools/call` calls them, waiting for approval where the space's policy asks for it.
 *
 * It uses the `Server`'s `onclose` and `oninitialized` hooks itself; wait on `closed`
 * instead of replacing them.
 */
export class SpaceMcpServer extends Server {
  readonly client: ParticipantClient;
  /** The one participant served as itself, if this face serves only one. */
  readonly only: string | undefined;
  private readonly tasks: SeatTasks;
  /** Resolves when the MCP connection ended (or `close()` was called). */
  readonly closed: Promise<void>;
  private readonly owned: boolean;
  private readonly ready: Promise<void>;
  private readonly log: Logger | undefined;
  private readonly approvalProgressMs: number;
  private readonly takesInput: boolean;
  /** The space's tools as this session lists them (tools/session-tools.ts). */
  private readonly tools: SessionTools;
  private initialized = false;
  private disposed = false;
  private resolveClosed!: () => void;
  /** Calls of ours held as proposals, by proposal id: told when someone approves. */
  private readonly awaiting = new Map<string, (approver: string) => void>();
  private readonly unsubscribe: (() => void)[] = [];
  /** Envelope ids of this session's calls still waiting (and their proposals) → the MCP request each serves. */
  private readonly made = new Map<string, Extra>();
  /** MCP logging of this session (logs/session-log.ts). */
  private readonly logs: SessionLog;
  private readonly desk: Desk;
  private readonly resources: SpaceResources;
  private readonly leaveDesk: () => string[];
  private readonly trace: FaceTrace | undefined;

  constructor(opts: SpaceMcpServerOptions) {
    const owned = !(opts.client instanceof ParticipantClient);
    const client = opts.client instanceof ParticipantClient ? opts.client : new ParticipantClient(opts.client);
    const welcome = client.welcome;
    const only = opts.only;
    const capabilities = faceCapabilities(only);
    // Approvals as tasks: the seat's store, shared by its sessions (tasks/tasks.ts).
    const tasks = tasksOf(client, opts.maxTasks);
    // Serving one participant, the seat's tasks of that participant's tools only.
    const taskView = tasks.view(only?.participant);
    super(
      only?.serverInfo
        ? { ...only.serverInfo, ...(opts.name ? { name: opts.name } : {}) }
        : {
            name: opts.name ?? (only ? only.participant : welcome?.space ? `mewgate-${welcome.space.id}` : "mewgate"),
            version: SERVER_VERSION,
          },
      {
        capabilities: { ...capabilities, tasks: TASK_CAPABILITY },
        instructions: instructions(welcome?.space?.id, welcome?.id, only),
        taskStore: taskView,
      },
    );
    this.only = only?.participant;
    this.trace = opts.trace;
    this.tasks = tasks;
    this.client = client;
    this.owned = owned;
    this.log = opts.logger?.child({ component: "mcp-server" });
    this.approvalProgressMs = Math.max(10, opts.approvalProgressMs ?? DEFAULT_APPROVAL_PROGRESS_MS);
    this.takesInput = opts.takesInput === true;
    this.tools = new SessionTools(
      client,
      this.only,
      this.log,
      () => (this.initialized && this.transport && !this.disposed ? this.sendToolListChanged() : undefined),
      () => this.disposed,
    );
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
    this.logs = new SessionLog(
      () => this.initialized && !this.disposed,
      (n) => this.notification(n),
      (err) => this.log?.debug({ err: err.message }, "could not send a log message"),
    );
    // connect() is idempotent: an open client answers at once, a connecting one shares its attempt.
    this.ready = client.connect().then(() => undefined);
    this.ready.catch(() => {});

    // A client that takes tasks hears which calls may wait for a person as one.
    // Serving one participant, its server's own pages, order and cursors (tools/own-pages.ts).
    this.setRequestHandler(ListToolsRequestSchema, async (request) => {
      const catalogue = await this.currentTools();
      const page = this.only === undefined ? undefined : await ownToolsPage(client, this.only, request.params?.cursor, catalogue);
      return {
        tools: withTaskSupport(page?.tools ?? catalogue.tools, this.getClientCapabilities()),
        ...(page?.nextCursor === undefined ? {} : { nextCursor: page.nextCursor }),
      };
    });
    this.setRequestHandler(CallToolRequestSchema, (request, extra) => this.callTool(request.params, extra));
    // Resources and prompts of the space's MCP servers, through the gateway (resources.ts).
    const resources = new SpaceResources(client, this.only);
    this.resources = resources;
    // What the space's tool servers ask back about this session's calls (held/callbacks.ts).
    this.desk = deskOf(client);
    this.leaveDesk = this.desk.add(this.session);
    this.setRequestHandler(SubscribeRequestSchema, async (request) => {
      await this.ready;
      const { uri } = request.params;
      if (this.desk.subscribe(this.session, uri)) {
        try {
          await resources.subscribe(uri);
        } catch (err) {
          this.desk.unsubscribe(this.session, uri);
          throw err;
        }
      }
      return {};
    });
    this.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
      if (this.desk.unsubscribe(this.session, request.params.uri)) await resources.unsubscribe(request.params.uri);
      return {};
    });
    this.setRequestHandler(SetLevelRequestSchema, async (request) => {
      this.logs.level = request.params.level;
      // Serving one participant as itself: its server's level too, and its log lines outside a call reach this client.
      if (this.only !== undefined && (only?.capabilities === undefined || only.capabilities.logging !== undefined))
        await this.ready
          .then(() => client.request(this.only!, "logging/setLevel", { level: request.params.level }, { timeoutMs: 10_000 }))
          .catch((err: Error) => this.log?.debug({ err: err.message }, "could not set the server's log level"));
      return {};
    });
    // The client's roots changed: the tool servers that take their roots from here ask again.
    this.setNotificationHandler(RootsListChangedNotificationSchema, async () => {
      for (const p of this.client.participants.values()) {
        if (p.kind === "mcp" && (this.only === undefined || p.id === this.only))
          this.client.notify(p.id, "notifications/roots/list_changed", {});
      }
    });
    // Resources, prompts and completions, as the face's capabilities declare them (read-handlers.ts).
    serveReads(this, resources, capabilities, this.ready, opts.trace, this.takesInput);
    this.oninitialized = () => {
      this.initialized = true;
    };
    this.onclose = () => this.dispose();

    this.unsubscribe.push(
      tasks.listen((task) => {
        if (!this.initialized || this.disposed || !this.getClientCapabilities()?.tasks || !taskView.sees(task)) return;
        this.notification({ method: "notifications/tasks/status", params: task }).catch((err: Error) =>
          this.log?.debug({ err: err.message }, "could not send a task's status"),
        );
      }),
      client.onNotification((n) => this.spaceNotification(n.method, n.params, n.from, n.envelope)),
      // A grant changes policies (a tool stops needing approval); a reconnect may find another catalogue.
      client.on("welcome", (w) => {
        if (w.refreshed || w.reconnected) void this.tools.changed();
      }),
      client.on("envelope", (env) => {
        if (env.kind !== "mcp/approve") return;
        for (const id of env.correlation_id ?? []) {
          const told = this.awaiting.get(id);
          if (!told) continue;
          told(env.from);
          this.logs.send("info", `${env.from} approved the call`, this.made.get(id));
        }
      }),
      // Without the space there is nothing to serve: end the MCP connection too.
      client.on("close", (e) => {
        if (!e.reconnecting) void this.close().catch(() => {});
      }),
    );
  }

  /** Closes the MCP connection, and the participant's connection if this server created it. */
  override async close(): Promise<void> {
    try {
      await super.close();
    } finally {
      this.dispose();
    }
  }

  /** The space's tools as this server lists them now (fetched from the gateway). */
  async currentTools(): Promise<Catalogue> {
    try {
      await this.ready;
      return await this.tools.refresh();
    } catch (err) {
      // Between reconnects the last known list is still the best answer.
      const last = this.tools.current;
      if (last) return last;
      throw new McpError(ErrorCode.InternalError, `cannot list the space's tools: ${(err as Error).message}`);
    }
  }

  private dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const off of this.unsubscribe.splice(0)) off();
    this.awaiting.clear();
    this.made.clear();
    for (const uri of this.leaveDesk()) void this.resources.unsubscribe(uri);
    if (this.owned) void this.client.close("MCP connection closed");
    this.resolveClosed();
  }

  private async callTool(params: CallToolRequest["params"], extra: Extra): Promise<CallToolResult | CreateTaskResult> {
    try {
      await this.ready;
    } catch (err) {
      return { content: [{ type: "text", text: `not connected to the space: ${(err as Error).message}` }], isError: true };
    }
    // Not in the list: a fresh one, or a tool that left it since (tools/session-tools.ts).
    const entry = await this.tools.find(params.name);
    if (!entry && this.only !== undefined) {
      // Serving one participant as itself: its server says how it answers a tool it does not have.
      const own = await askUnknownTool(this.client, this.only, params.name, params.arguments, extra.signal);
      if (own) return own;
    }
    if (!entry)
      throw new McpError(ErrorCode.InvalidParams, `unknown tool: ${params.name} (list the tools again: the space's tools change)`);
    if (params.task !== undefined) {
      // Answered at once; the call goes on past this request (tasks/tasks.ts), with no progress relayed.
      // A tool its server runs as a task is called as one (once approved), and its server's task followed (tasks/tasks.ts).
      const asTask = entry.taskSupport === "required" || entry.taskSupport === "optional" ? params.task : undefined;
      // The gateway keeps the end for the seat as long as the task is kept, should it end while the seat is away.
      const keep = { [TASK_TTL_META_KEY]: params.task.ttl ?? DEFAULT_TTL_MS };
      const task = await this.tasks.start(entry.real, params.task.ttl, (signal, onProposal) =>
        this.runCall(entry.real, params, { ...extra, signal, _meta: {} }, onProposal, asTask, undefined, keep),
      );
      return { task };
    }
    return traced(this.trace, { ...requestOf("tools/call", extra), tool: params.name }, extra._meta, (tp) =>
      this.runCall(entry.real, params, extra, undefined, undefined, tp),
    );
  }

  private async runCall(
    real: string,
    params: CallToolRequest["params"],
    extra: Extra,
    proposed?: (proposal: Envelope) => void,
    asTask?: CallToolRequest["params"]["task"],
    traceparent?: string,
    keep?: Record<string, number>,
  ): Promise<CallToolResult | CreateTaskResult> {
    const token = extra._meta?.progressToken;
    const relay = token === undefined ? undefined : new ProgressRelay(token, extra, this.log);
    let proposalId: string | undefined;
    let ticker: NodeJS.Timeout | undefined;
    const onProposal = (proposal: Envelope) => {
      proposed?.(proposal);
      proposalId = proposal.id;
      this.made.set(proposal.id, extra);
      this.log?.info({ tool: real, proposal: proposal.id }, "call waits for approval");
      this.logs.send("info", `${real} waits for approval in the space (proposal ${proposal.id})`, extra);
      this.awaiting.set(proposal.id, (approver) => {
        clearInterval(ticker);
        relay?.tick(`approved by ${approver}; running ${real}`);
      });
      if (relay) {
        const message = `waiting for approval of ${real} (proposal ${proposal.id})`;
        relay.tick(message);
        ticker = setInterval(() => relay.tick(message), this.approvalProgressMs);
      }
    };
    let callId: string | undefined;
    try {
      const pending = this.client.request(
        GATEWAY_ID,
        "tools/call",
        {
          name: real,
          arguments: params.arguments ?? {},
          // A 2026-07-28 client's retry params go on as they came (held/input.ts).
          ...(this.takesInput ? retryParams(extra._meta) : {}),
          // What this session's client offers the server to ask back (client-caps.ts); a task's call has no client to ask.
          _meta: {
            ...forwardedMeta(extra._meta),
            // Under the face's span, when traced (face-trace.ts).
            ...(traceparent === undefined ? {} : { traceparent }),
            [CLIENT_CAPS_KEY]: proposed ? {} : offeredCapabilities(this.getClientCapabilities()),
            // The client takes a server's input_required itself (held/input.ts).
            ...(this.takesInput ? { [TAKES_INPUT]: true } : {}),
            ...keep,
          },
          ...(asTask === undefined ? {} : { task: asTask }),
        },
        // A task waits as long as the space keeps its proposal (the gateway expires it), not the client's own deadline.
        {
          signal: extra.signal,
          onProposal,
          onProgress: relay ? (p) => relay.forward(p) : undefined,
          ...(proposed ? { timeoutMs: TASK_WAIT_MS } : {}),
        },
      );
      callId = pending.id;
      this.made.set(callId, extra);
      const result = await pending;
      if (asTask !== undefined) {
        const created = CreateTaskResultSchema.safeParse(result);
        if (created.success) return created.data;
      }
      if (this.takesInput && isInputRequired(result)) return result as CallToolResult;
      const parsed = CallToolResultSchema.safeParse(result);
      if (parsed.success) return parsed.data;
      return { content: [{ type: "text", text: `${real} answered with something that is not an MCP tool result` }], isError: true };
    } catch (err) {
      if (!(err instanceof ParticipantError)) throw err;
      this.log?.info({ tool: real, proposal: proposalId, code: err.code }, "call failed");
      // A task says how it ended by its status (tasks/tasks.ts): it wants the failure itself.
      if (proposed) throw err;
      // The owner's own JSON-RPC error goes through as one (invalid params, unknown method…).
      // (RpcError rather than McpError, whose message would gain a second "MCP error" prefix.)
      if (err.code === "rpc_error") throw new RpcError(err.rpcCode ?? ErrorCode.InternalError, err.message, err.data);
      // At 2026-07-28 a server's own error whose data names a reason (a bad request state…) is the server's error (held/input.ts).
      if (this.takesInput && serverError(err)) throw new RpcError(err.rpcCode ?? ErrorCode.InternalError, err.message, err.data);
      // Aborted by the MCP client: the SDK sends no answer to a cancelled request.
      if (err.code === "cancelled") throw err;
      if (err.code === "unknown_tool") void this.tools.changed();
      return failureResult(real, err);
    } finally {
      clearInterval(ticker);
      if (proposalId !== undefined) {
        this.awaiting.delete(proposalId);
        this.made.delete(proposalId);
      }
      if (callId !== undefined) this.made.delete(callId);
    }
  }

  // --- what the space tells or asks this session ----------------------------------------

  /** This session as the desk sees it (held/callbacks.ts). */
  private readonly session: Session = {
    made: (ids) => ids.find((id) => this.made.has(id)),
    offers: (method) => {
      const caps = this.getClientCapabilities();
      if (method === "elicitation/create") return caps?.elicitation !== undefined;
      if (method === "elicitation/create#url") return caps?.elicitation?.url !== undefined;
      if (method === "sampling/createMessage") return caps?.sampling !== undefined;
      if (method === "roots/list") return caps?.roots !== undefined;
      return false;
    },
    ask: (req, about) => askClient(this, req, about === undefined ? undefined : this.made.get(about), this.only, this.log),
  };

  private spaceNotification(method: string, params: unknown, from: string, env: Envelope): void {
    if (method === "notifications/tools/list_changed" && from === GATEWAY_ID) return void this.tools.changed();
    if (!this.initialized || this.disposed) return;
    // Serving one participant: nothing another one says reaches the client.
    if (this.only !== undefined && from !== this.only) return;
    const send = (p: Promise<void>) =>
      void p.catch((err: Error) => this.log?.debug({ err: err.message, method }, "could not tell the MCP client"));
    switch (method) {
      case "notifications/resources/updated": {
        const uri = typeof params === "object" && params !== null ? (params as Record<string, unknown>)["uri"] : undefined;
        if (typeof uri === "string" && this.desk.subscribers(uri).includes(this.session)) send(this.sendResourceUpdated({ uri }));
        return;
      }
      case "notifications/tools/list_changed":
        // The server's own word, to a face serving it as itself (the whole space's face hears the gateway's).
        if (this.only !== undefined) send(this.sendToolListChanged());
        return;
      case "notifications/resources/list_changed":
        return send(this.sendResourceListChanged());
      case "notifications/prompts/list_changed":
        return send(this.sendPromptListChanged());
      case "notifications/elicitation/complete": {
        // A URL flow a tool server asked for, finished out of band: the session that was asked hears it.
        const about = (env.correlation_id ?? []).find((id) => this.made.has(id));
        if (about !== undefined)
          send(
            this.made
              .get(about)!
              .sendNotification({ method: "notifications/elicitation/complete", params: params as { elicitationId: string } }),
          );
        return;
      }
      case "notifications/message": {
        // A tool server's log line about one of this session's calls; serving one participant
        // as itself, also one its server sent outside any call (to whoever set a level there).
        const about = (env.correlation_id ?? []).find((id) => this.made.has(id));
        const outside = this.only !== undefined && (env.correlation_id ?? []).length === 0;
        if (about !== undefined || outside)
          this.logs.fromServer(params, from, this.only, about === undefined ? undefined : this.made.get(about));
        return;
      }
    }
  }
}

/** Creates the MCP server for a participant of a space; connect it to any MCP server transport. */
export function createSpaceMcpServer(opts: SpaceMcpServerOptions): SpaceMcpServer {
  return new SpaceMcpServer(opts);
}
