/**
 * Counters and histograms for `/metrics` (Prometheus text format), kept per space. Plain
 * numbers incremented where things happen: nothing on the message path allocates.
 */

/** Upper bounds (seconds) of the histogram buckets. */
const DECISION_BUCKETS = [1, 5, 15, 60, 300, 900, 3600, 14_400, 86_400];
const WRITE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
/** The buckets OpenTelemetry's semantic conventions advise for `mcp.server.operation.duration`. */
const OPERATION_BUCKETS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300];

export class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(readonly buckets: readonly number[]) {
    this.counts = buckets.map(() => 0);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) this.counts[i]!++;
  }
}

export class SpaceMetrics {
  envelopesIn = 0;
  envelopesOut = 0;
  readonly proposals = new Map<string, number>();
  readonly calls = new Map<string, number>();
  /** Decisions on calls, by outcome and kind of decider (`outcome\u0000decider`; both from short fixed lists). */
  readonly decisions = new Map<string, number>();
  readonly decisionSeconds = new Histogram(DECISION_BUCKETS);
  readonly storeWriteSeconds = new Histogram(WRITE_BUCKETS);
  /** How long each routed MCP request took, by method and error type ("" when it succeeded). */
  readonly operationSeconds = new Map<string, Histogram>();

  operation(method: string, error: string | undefined, seconds: number): void {
    // Bounded: methods a participant may route are a short list, and error types are the gateway's own words or a code.
    const key = `${method.slice(0, 64)}\u0000${(error ?? "").slice(0, 32)}`;
    let h = this.operationSeconds.get(key);
    if (!h) {
      if (this.operationSeconds.size >= 256) return;
      h = new Histogram(OPERATION_BUCKETS);
      this.operationSeconds.set(key, h);
    }
    h.observe(seconds);
  }

  proposal(state: string): void {
    this.proposals.set(state, (this.proposals.get(state) ?? 0) + 1);
  }

  call(outcome: string): void {
    this.calls.set(outcome, (this.calls.get(outcome) ?? 0) + 1);
  }

  /** A decision on a call (proposals/telemetry.ts): `approved`, `rejected`, `expired`, `withdrawn`, `allowed`, `denied`, by whom. */
  decision(outcome: string, decider: string): void {
    const key = `${outcome}\u0000${decider}`;
    this.decisions.set(key, (this.decisions.get(key) ?? 0) + 1);
  }
}

export interface SpaceSample {
  space: string;
  members: number;
  pending: number;
  /** Tools in the catalogue the gateway flagged (tools/inspect.ts). */
  flagged?: number;
  metrics: SpaceMetrics;
}

/** The Prometheus text exposition of the gateway's figures. */
export function render(connections: number, spaces: SpaceSample[]): string {
  const out: string[] = [];
  const metric = (name: string, type: string, help: string) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  const label = (labels: Record<string, string>) =>
    `{${Object.entries(labels)
      .map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, "_")}"`)
      .join(",")}}`;
  metric("mewgate_connections", "gauge", "WebSocket connections open, joined or not");
  out.push(`mewgate_connections ${connections}`);
  metric("mewgate_members", "gauge", "Participants connected to a space");
  for (const s of spaces) out.push(`mewgate_members${label({ space: s.space })} ${s.members}`);
  metric("mewgate_envelopes_in_total", "counter", "Frames received from participants");
  for (const s of spaces) out.push(`mewgate_envelopes_in_total${label({ space: s.space })} ${s.metrics.envelopesIn}`);
  metric("mewgate_envelopes_out_total", "counter", "Envelopes delivered to participants (one per recipient)");
  for (const s of spaces) out.push(`mewgate_envelopes_out_total${label({ space: s.space })} ${s.metrics.envelopesOut}`);
  metric("mewgate_proposals_pending", "gauge", "Proposals waiting for a decision");
  for (const s of spaces) out.push(`mewgate_proposals_pending${label({ space: s.space })} ${s.pending}`);
  metric(
    "mewgate_tools_flagged",
    "gauge",
    "Tools whose definitions the gateway flagged (hidden characters, markup, instructions to the model)",
  );
  for (const s of spaces) out.push(`mewgate_tools_flagged${label({ space: s.space })} ${s.flagged ?? 0}`);
  metric("mewgate_proposals_total", "counter", "Proposal transitions, by the state reached");
  for (const s of spaces)
    for (const [state, n] of s.metrics.proposals) out.push(`mewgate_proposals_total${label({ space: s.space, state })} ${n}`);
  metric("mewgate_calls_total", "counter", "Calls routed by the gateway, by outcome");
  for (const s of spaces)
    for (const [outcome, n] of s.metrics.calls) out.push(`mewgate_calls_total${label({ space: s.space, outcome })} ${n}`);
  metric("mewgate_decisions_total", "counter", "Decisions on calls, by outcome and the kind of decider");
  for (const s of spaces)
    for (const [key, n] of s.metrics.decisions) {
      const [outcome, decider] = key.split("\u0000");
      out.push(`mewgate_decisions_total${label({ space: s.space, outcome: outcome!, decider: decider! })} ${n}`);
    }
  const histogram = (name: string, help: string, pick: (m: SpaceMetrics) => Histogram) => {
    metric(name, "histogram", help);
    for (const s of spaces) {
      const h = pick(s.metrics);
      h.buckets.forEach((b, i) => {
        out.push(`${name}_bucket${label({ space: s.space, le: String(b) })} ${h.counts[i]}`);
      });
      out.push(
        `${name}_bucket${label({ space: s.space, le: "+Inf" })} ${h.count}`,
        `${name}_sum${label({ space: s.space })} ${h.sum}`,
        `${name}_count${label({ space: s.space })} ${h.count}`,
      );
    }
  };
  histogram("mewgate_decision_seconds", "Time from a proposal to its decision", (m) => m.decisionSeconds);
  histogram("mewgate_store_write_seconds", "Time to make one batch of changes durable (write and fdatasync)", (m) => m.storeWriteSeconds);
  // OpenTelemetry's mcp.server.operation.duration, in Prometheus' naming.
  const op = "mcp_server_operation_duration_seconds";
  metric(op, "histogram", "Time from a request routed by the gateway to its answer or failure, by MCP method and error type");
  for (const s of spaces) {
    for (const [key, h] of s.metrics.operationSeconds) {
      const [method, error] = key.split("\u0000") as [string, string];
      const l = (more: Record<string, string>) =>
        label({ space: s.space, mcp_method_name: method, ...(error ? { error_type: error } : {}), ...more });
      h.buckets.forEach((b, i) => {
        out.push(`${op}_bucket${l({ le: String(b) })} ${h.counts[i]}`);
      });
      out.push(`${op}_bucket${l({ le: "+Inf" })} ${h.count}`, `${op}_sum${l({})} ${h.sum}`, `${op}_count${l({})} ${h.count}`);
    }
  }
  return `${out.join("\n")}\n`;
}
