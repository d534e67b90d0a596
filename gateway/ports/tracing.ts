/**
 * OpenTelemetry traces of call chains: a span per MCP request the gateway routes, a span
 * for the time a proposal waits for a person, and the W3C trace context carried in
 * `params._meta.traceparent` to the target and taken from the caller, so an agent → agent
 * → tool chain is one trace with its timings, across cluster nodes too (the context rides
 * in the payload, which proxies pass unchanged).
 *
 * Off unless `gateway.telemetry` or the standard `OTEL_*` environment names an OTLP
 * endpoint. Off, `Tracing.off` is used: every method returns at once, no span object
 * is made, nothing is added to payloads, and the OpenTelemetry packages are never loaded
 * (`otel()`: they were the larger part of the code a start loaded). On, each space has its own provider (tests
 * run several gateways in one process; nothing global is registered) exporting OTLP/HTTP
 * JSON in batches, flushed when the space closes.
 *
 * Attributes follow the OpenTelemetry semantic conventions for MCP and GenAI:
 * `mcp.method.name`, `gen_ai.tool.name`, `gen_ai.operation.name`, `jsonrpc.request.id`,
 * `mcp.resource.uri`, `gen_ai.prompt.name`, `error.type` and, for a JSON-RPC error,
 * `rpc.response.status_code`; the gateway's own under `mewgate.*`.
 */
import { createRequire } from "node:module";
import type { Span, SpanContext, Tracer } from "@opentelemetry/api";
import type { BasicTracerProvider } from "@opentelemetry/sdk-trace-base";
import type { Logger } from "pino";

/** `gateway.telemetry` in space.yaml. */
export interface TelemetryConfig {
  /** OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces. */
  otlp_endpoint?: string | undefined;
  service_name?: string | undefined;
  /** Extra headers for the exporter (an API key); never logged. */
  headers?: Record<string, string> | undefined;
}

/** One routed call's span. */
export interface CallTrace {
  /** The W3C `traceparent` naming this span, for the request's `_meta`. */
  readonly traceparent: string;
  readonly context: SpanContext;
  /** Ends the span; `error` is its `error.type` (`timeout`, `tool_error`, a JSON-RPC code, …). */
  end(error?: string): void;
  /** What allowed the call (a rule, a learned rule, a grant): its attributes and a `mewgate.decision` event. */
  decided?(facts: DecisionFacts): void;
}

/**
 * One decision on a call, as telemetry tells it (OpenTelemetry has no approval conventions
 * yet: these are mewgate's own names). `id` is the opaque decision id the audit entry and the
 * receipt carry too (proposals/receipts.ts).
 */
export interface DecisionFacts {
  id: string;
  outcome: "approved" | "rejected" | "expired" | "withdrawn" | "allowed";
  /** Who decided, by kind: a person, an agent, a reviewer; a learned rule, a rule, a grant, the caller's capabilities; the clock; the proposer. */
  decider: "person" | "agent" | "reviewer" | "learned_rule" | "rule" | "grant" | "capability" | "timeout" | "proposer";
  by?: string | undefined;
  /** The rule that asked for a person, or allowed the call, in words. */
  rule?: string | undefined;
  /** The gateway's risk level of the call (policy/learn/risk.ts). */
  risk?: string | undefined;
}

/** A decision's span attributes (and event attributes): `mewgate.decision.*`. */
export function decisionAttributes(f: DecisionFacts): Record<string, string> {
  return {
    "mewgate.decision.id": f.id,
    "mewgate.decision.outcome": f.outcome,
    "mewgate.decision.decider": f.decider,
    ...(f.by !== undefined ? { "mewgate.decision.by": f.by } : {}),
    ...(f.rule !== undefined ? { "mewgate.decision.rule": f.rule.slice(0, 256) } : {}),
    ...(f.risk !== undefined ? { "mewgate.decision.risk": f.risk } : {}),
  };
}

export interface CallInfo {
  space: string;
  method: string;
  tool?: string | undefined;
  caller: string;
  target: string;
  rpcId: string | number;
  proposal?: string | undefined;
  /** `resources/read`, `resources/subscribe`, `resources/unsubscribe`: the URI (`mcp.resource.uri`). */
  resourceUri?: string | undefined;
  /** `prompts/get`: the prompt's name (`gen_ai.prompt.name`). */
  prompt?: string | undefined;
}

type Parent = string | SpanContext | undefined;

/** A request an MCP face of the space serves (participants/mcp-server), for its SERVER span. */
export interface FaceCallInfo {
  space: string;
  /** The participant the client acts as. */
  seat: string;
  method: string;
  tool?: string | undefined;
  rpcId?: string | number | undefined;
  /** `Mcp-Session-Id` (`mcp.session.id`), when the revision has sessions. */
  sessionId?: string | undefined;
  /** `mcp.protocol.version`. */
  protocolVersion?: string | undefined;
  /** `network.transport`: `tcp` for streamable HTTP, `pipe` for stdio. */
  transport: "tcp" | "pipe";
  /** `resources/read`: the URI (`mcp.resource.uri`). */
  resourceUri?: string | undefined;
  /** `prompts/get`: the prompt's name (`gen_ai.prompt.name`). */
  prompt?: string | undefined;
}

/** A request the bridge sends to its MCP server, for its CLIENT span. */
export interface OutboundCallInfo {
  /** The bridged participant. */
  server: string;
  method: string;
  tool?: string | undefined;
  /** `network.transport`: `pipe` for a child's stdio, `tcp` for HTTP. */
  transport: "tcp" | "pipe";
  sessionId?: string | undefined;
  protocolVersion?: string | undefined;
  /** Over HTTP, the server's host and port (`server.address`, `server.port`). */
  serverAddress?: string | undefined;
  serverPort?: number | undefined;
}

/** What a proposal's wait span reads of it (proposals/book.ts `Proposal`). */
export interface WaitingProposal {
  id: string;
  proposer: string;
  owner: string;
  tool?: string | undefined;
  method: string;
  params: Record<string, unknown>;
  decidedBy?: string | undefined;
}

/** The OpenTelemetry API and SDK, loaded (synchronously, from node_modules) the first time a space traces. */
interface Otel {
  api: typeof import("@opentelemetry/api");
  propagator: import("@opentelemetry/core").W3CTraceContextPropagator;
  OTLPTraceExporter: typeof import("@opentelemetry/exporter-trace-otlp-http").OTLPTraceExporter;
  resourceFromAttributes: typeof import("@opentelemetry/resources").resourceFromAttributes;
  BasicTracerProvider: typeof import("@opentelemetry/sdk-trace-base").BasicTracerProvider;
  BatchSpanProcessor: typeof import("@opentelemetry/sdk-trace-base").BatchSpanProcessor;
}

let loaded: Otel | undefined;

function otel(): Otel {
  if (!loaded) {
    // Not `import`: a bundle would load the SDK with the rest of the gateway, tracing or not.
    const load = createRequire(import.meta.url);
    const core = load("@opentelemetry/core") as typeof import("@opentelemetry/core");
    const base = load("@opentelemetry/sdk-trace-base") as typeof import("@opentelemetry/sdk-trace-base");
    loaded = {
      api: load("@opentelemetry/api") as typeof import("@opentelemetry/api"),
      propagator: new core.W3CTraceContextPropagator(),
      OTLPTraceExporter: (load("@opentelemetry/exporter-trace-otlp-http") as typeof import("@opentelemetry/exporter-trace-otlp-http"))
        .OTLPTraceExporter,
      resourceFromAttributes: (load("@opentelemetry/resources") as typeof import("@opentelemetry/resources")).resourceFromAttributes,
      BasicTracerProvider: base.BasicTracerProvider,
      BatchSpanProcessor: base.BatchSpanProcessor,
    };
  }
  return loaded;
}

const getter = { get: (c: Record<string, string>, k: string) => c[k], keys: (c: Record<string, string>) => Object.keys(c) };
const setter = {
  set: (c: Record<string, string>, k: string, v: string) => {
    c[k] = v;
  },
};

/** How long a proposal's wait span is kept after it ends, for the call it routes to hang under. */
const MAX_WAITS = 10_000;

export class Tracing {
  /** Tracing off: costs a property read per call. */
  static readonly off = new Tracing(undefined, undefined);

  private readonly waits = new Map<string, Span>();
  /** Ended waits of approved proposals, until their call opens under them. */
  private readonly decided = new Map<string, SpanContext>();

  private constructor(
    private readonly tracer: Tracer | undefined,
    private readonly provider: BasicTracerProvider | undefined,
  ) {}

  get on(): boolean {
    return this.tracer !== undefined;
  }

  /**
   * Tracing for a space: from `gateway.telemetry`, else the standard environment
   * (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`,
   * `OTEL_SERVICE_NAME`); off when neither names an endpoint, or `OTEL_SDK_DISABLED=true`,
   * or `OTEL_TRACES_EXPORTER=none`.
   */
  static from(config: TelemetryConfig | undefined, env: NodeJS.ProcessEnv, log: Logger): Tracing {
    if (env["OTEL_SDK_DISABLED"]?.toLowerCase() === "true" || env["OTEL_TRACES_EXPORTER"]?.toLowerCase() === "none") return Tracing.off;
    const base = env["OTEL_EXPORTER_OTLP_ENDPOINT"]?.replace(/\/+$/, "");
    const url = config?.otlp_endpoint ?? env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] ?? (base ? `${base}/v1/traces` : undefined);
    if (!url) return Tracing.off;
    const service = config?.service_name ?? env["OTEL_SERVICE_NAME"] ?? "mewgate";
    const { OTLPTraceExporter, BasicTracerProvider, BatchSpanProcessor, resourceFromAttributes } = otel();
    const exporter = new OTLPTraceExporter({ url, ...(config?.headers ? { headers: config.headers } : {}), timeoutMillis: 5000 });
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ "service.name": service }),
      spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 500, maxQueueSize: 8192, maxExportBatchSize: 512 })],
    });
    // The endpoint only: its query string could carry a credential.
    log.info({ endpoint: url.replace(/\?.*$/, ""), service }, "exporting traces over OTLP/HTTP");
    return new Tracing(provider.getTracer("mewgate"), provider);
  }

  /** A span for a call being routed, under `parent` (a caller's traceparent, or the span of what it serves). */
  call(info: CallInfo, parent: Parent): CallTrace | undefined {
    const tracer = this.tracer;
    if (!tracer) return undefined;
    const isTool = info.method === "tools/call" && info.tool !== undefined;
    const span = tracer.startSpan(
      isTool ? `${info.method} ${info.tool}` : info.method,
      {
        kind: otel().api.SpanKind.SERVER,
        attributes: {
          "mcp.method.name": info.method,
          "jsonrpc.request.id": String(info.rpcId),
          "mewgate.space": info.space,
          "mewgate.caller": info.caller,
          "mewgate.target": info.target,
          ...(isTool ? { "gen_ai.tool.name": info.tool, "gen_ai.operation.name": "execute_tool" } : {}),
          ...(info.proposal ? { "mewgate.proposal.id": info.proposal } : {}),
          ...(info.resourceUri ? { "mcp.resource.uri": info.resourceUri } : {}),
          ...(info.prompt ? { "gen_ai.prompt.name": info.prompt } : {}),
        },
      },
      contextOf(parent),
    );
    const context = span.spanContext();
    return {
      traceparent: traceparentOf(span),
      context,
      end: (error) => {
        if (error !== undefined) {
          span.setAttribute("error.type", error);
          // A JSON-RPC error's code is the response's status code too.
          if (/^-?\d{1,6}$/.test(error)) span.setAttribute("rpc.response.status_code", error);
          span.setStatus({ code: otel().api.SpanStatusCode.ERROR });
        }
        span.end();
      },
      decided: (facts) => {
        const attrs = decisionAttributes(facts);
        span.setAttributes(attrs);
        span.addEvent("mewgate.decision", attrs);
      },
    };
  }

  /**
   * The SERVER span of a request an MCP face serves, under the client's own `traceparent`
   * (checked: a forged or oversized one starts a new trace); its `traceparent` goes on in the
   * request to the space, so the routed call hangs under it.
   */
  face(info: FaceCallInfo, clientTraceparent: string | undefined): CallTrace | undefined {
    const isTool = info.method === "tools/call" && info.tool !== undefined;
    return this.span(otel().api.SpanKind.SERVER, isTool ? `${info.method} ${info.tool}` : info.method, clientTraceparent, {
      "mcp.method.name": info.method,
      "network.transport": info.transport,
      ...(info.transport === "tcp" ? { "network.protocol.name": "http" } : {}),
      "mewgate.space": info.space,
      "mewgate.caller": info.seat,
      ...(info.rpcId === undefined ? {} : { "jsonrpc.request.id": String(info.rpcId) }),
      ...(info.sessionId ? { "mcp.session.id": info.sessionId.slice(0, 256) } : {}),
      ...(info.protocolVersion ? { "mcp.protocol.version": info.protocolVersion.slice(0, 32) } : {}),
      ...(isTool ? { "gen_ai.tool.name": info.tool!.slice(0, 256), "gen_ai.operation.name": "execute_tool" } : {}),
      ...(info.resourceUri ? { "mcp.resource.uri": info.resourceUri.slice(0, 1024) } : {}),
      ...(info.prompt ? { "gen_ai.prompt.name": info.prompt.slice(0, 256) } : {}),
    });
  }

  /**
   * The CLIENT span of a request the bridge sends to its MCP server, under the routed call's
   * span (`traceparent` of the request it serves); its own `traceparent` goes to the server.
   */
  outbound(info: OutboundCallInfo, parent: string | undefined): CallTrace | undefined {
    const isTool = info.method === "tools/call" && info.tool !== undefined;
    return this.span(otel().api.SpanKind.CLIENT, isTool ? `${info.method} ${info.tool}` : info.method, parent, {
      "mcp.method.name": info.method,
      "network.transport": info.transport,
      ...(info.transport === "tcp" ? { "network.protocol.name": "http" } : {}),
      "mewgate.target": info.server,
      ...(info.serverAddress ? { "server.address": info.serverAddress.slice(0, 256) } : {}),
      ...(info.serverPort !== undefined ? { "server.port": info.serverPort } : {}),
      ...(info.sessionId ? { "mcp.session.id": info.sessionId.slice(0, 256) } : {}),
      ...(info.protocolVersion ? { "mcp.protocol.version": info.protocolVersion.slice(0, 32) } : {}),
      ...(isTool ? { "gen_ai.tool.name": info.tool!.slice(0, 256), "gen_ai.operation.name": "execute_tool" } : {}),
    });
  }

  private span(
    kind: import("@opentelemetry/api").SpanKind,
    name: string,
    parent: string | undefined,
    attributes: Record<string, string | number>,
  ): CallTrace | undefined {
    const tracer = this.tracer;
    if (!tracer) return undefined;
    const checked = traceparentIn({ traceparent: parent });
    const span = tracer.startSpan(name.slice(0, 300), { kind, attributes }, contextOf(checked));
    return {
      traceparent: traceparentOf(span),
      context: span.spanContext(),
      end: (error) => {
        if (error !== undefined) {
          span.setAttribute("error.type", error);
          if (/^-?\d{1,6}$/.test(error)) span.setAttribute("rpc.response.status_code", error);
          span.setStatus({ code: otel().api.SpanStatusCode.ERROR });
        }
        span.end();
      },
    };
  }

  /**
   * The span of a request being routed, under the wait of the proposal it carries out,
   * else the caller's own `_meta.traceparent`, else the call the caller is serving; and
   * the request's params carrying the new span's context, so the target, and whatever it
   * calls in turn, continue the trace.
   */
  route(
    info: CallInfo,
    params: Record<string, unknown> | undefined,
    serving: SpanContext | undefined,
  ): { trace: CallTrace; params: Record<string, unknown> } | undefined {
    if (!this.tracer) return undefined;
    const meta = params?.["_meta"] as Record<string, unknown> | undefined;
    const waited = info.proposal === undefined ? undefined : this.takeDecided(info.proposal);
    const t = this.call({ ...info, ...namedIn(info.method, params) }, waited ?? traceparentIn(meta) ?? serving)!;
    return { trace: t, params: { ...params, _meta: { ...meta, traceparent: t.traceparent } } };
  }

  /**
   * A proposal changed (the space's book tells): its wait for a person starts as a span
   * under the proposer's `_meta.traceparent`, else the call it is serving (`serving`), and
   * ends with the decision and who made it.
   */
  proposal(
    space: string,
    p: WaitingProposal,
    event: string,
    from: string | undefined,
    serving: () => SpanContext | undefined,
    facts?: () => DecisionFacts | undefined,
  ): void {
    if (!this.tracer) return;
    if (event === "proposed") {
      const tool = p.tool === undefined ? undefined : `${p.owner || "*"}/${p.tool}`;
      this.waitStarted({ space, id: p.id, proposer: p.proposer, tool, method: p.method }, traceparentIn(p.params["_meta"]) ?? serving());
    } else if ((from === "pending" || from === "interrupted") && event !== "interrupted") {
      this.waitEnded(p.id, event, p.decidedBy, facts?.());
    }
  }

  /** A proposal starts waiting for a person. */
  waitStarted(info: { space: string; id: string; proposer: string; tool?: string | undefined; method: string }, parent: Parent): void {
    const tracer = this.tracer;
    if (!tracer || this.waits.has(info.id) || this.waits.size >= MAX_WAITS) return;
    const span = tracer.startSpan(
      `await approval ${info.tool ?? info.method}`,
      {
        kind: otel().api.SpanKind.INTERNAL,
        attributes: {
          "mewgate.space": info.space,
          "mewgate.proposal.id": info.id,
          "mewgate.proposer": info.proposer,
          "mcp.method.name": info.method,
          ...(info.tool ? { "gen_ai.tool.name": info.tool } : {}),
        },
      },
      contextOf(parent),
    );
    this.waits.set(info.id, span);
  }

  /** A proposal stopped waiting: decided (`approved`, `rejected`), withdrawn or expired. */
  waitEnded(id: string, decision: string, by: string | undefined, facts?: DecisionFacts): void {
    const span = this.waits.get(id);
    if (!span) return;
    this.waits.delete(id);
    span.setAttribute("mewgate.proposal.decision", decision);
    if (by !== undefined) span.setAttribute("mewgate.proposal.decided_by", by);
    // Every decision, a rejection or an expiry too, leaves its id, its decider and the rule and risk on the wait's span.
    if (facts) {
      const attrs = decisionAttributes(facts);
      span.setAttributes(attrs);
      span.addEvent("mewgate.decision", attrs);
    }
    span.end();
    if (decision === "approved") {
      if (this.decided.size >= MAX_WAITS) this.decided.delete(this.decided.keys().next().value!);
      this.decided.set(id, span.spanContext());
    }
  }

  /** The wait span of an approved proposal, which its call hangs under (taken once). */
  takeDecided(id: string): SpanContext | undefined {
    const ctx = this.decided.get(id);
    this.decided.delete(id);
    return ctx;
  }

  /** Sends what is buffered and stops. */
  async shutdown(): Promise<void> {
    for (const span of this.waits.values()) span.end();
    this.waits.clear();
    await this.provider?.shutdown().catch(() => {});
  }
}

/** A `_meta.traceparent` value worth trusting: the W3C shape, bounded. */
export function traceparentIn(meta: unknown): string | undefined {
  const t = typeof meta === "object" && meta !== null ? (meta as Record<string, unknown>)["traceparent"] : undefined;
  return typeof t === "string" && t.length === 55 && /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(t) ? t : undefined;
}

function contextOf(parent: Parent) {
  const { api, propagator } = otel();
  if (parent === undefined) return api.ROOT_CONTEXT;
  if (typeof parent === "string") return propagator.extract(api.ROOT_CONTEXT, { traceparent: parent }, getter);
  return api.trace.setSpanContext(api.ROOT_CONTEXT, parent);
}

function traceparentOf(span: Span): string {
  const carrier: Record<string, string> = {};
  const { api, propagator } = otel();
  propagator.inject(api.trace.setSpan(api.ROOT_CONTEXT, span), carrier, setter);
  return carrier["traceparent"]!;
}

/** The resource URI or prompt name a request names, for its span (bounded: a caller wrote them). */
function namedIn(method: string, params: Record<string, unknown> | undefined): { resourceUri?: string; prompt?: string } {
  const clip = (v: unknown) => (typeof v === "string" && v.length > 0 ? v.slice(0, 1024) : undefined);
  if (method === "resources/read" || method === "resources/subscribe" || method === "resources/unsubscribe") {
    const uri = clip(params?.["uri"]);
    return uri ? { resourceUri: uri } : {};
  }
  if (method === "prompts/get") {
    const name = clip(params?.["name"]);
    return name ? { prompt: name } : {};
  }
  return {};
}
