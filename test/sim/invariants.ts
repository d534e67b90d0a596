/**
 * What must hold after every simulated run, read off the trace of frames (what each
 * participant sent and received) and the audit trail:
 *
 * - every call ends exactly once: each request a participant sent gets one answer — a
 *   response, a refusal, or the rejection of the proposal it became — never two; none, only when its caller gave up on it
 *   (cancelled it, or withdrew the proposal it became) or left the space;
 * - no proposal the gateway announced is lost: the audit trail has it, ended or pending;
 * - no proposal is held that no approval could route (an approval failing as a cycle);
 * - and what the world checked while running (no one twice in a chain, depth and the
 *   number of pending calls bounded).
 */
import type { Run } from "./world.js";

interface Frame {
  dir: "→" | "←";
  who: string;
  env: { id?: string; kind?: string; correlation_id?: string[]; payload?: { id?: unknown; method?: string } };
}

const ENDED = new Set(["rejected", "withdrawn", "expired", "failed", "answered", "pending", "routed", "approved"]);

export function parseTrace(trace: readonly string[]): Frame[] {
  return trace.map((line) => {
    const a = line.indexOf(" ");
    const b = line.indexOf(" ", a + 1);
    const c = line.indexOf(" ", b + 1);
    return { dir: line.slice(a + 1, b) as Frame["dir"], who: line.slice(b + 1, c), env: JSON.parse(line.slice(c + 1)) as Frame["env"] };
  });
}

export function checkRun(run: Pick<Run, "trace" | "violations" | "proposals" | "faults">): string[] {
  const out = [...run.violations];
  const frames = parseTrace(run.trace);
  const left = new Set(run.faults.filter((f) => f.includes(" leave ")).map((f) => f.split(" ").at(-1)!));
  const requests = new Map<string, { who: string; answers: number; cancelled: boolean }>();
  const approvals = new Set<string>();
  for (const f of frames) {
    const { env } = f;
    // A proposal its proposer withdraws is a call given up, like a cancelled one.
    if (f.dir === "→" && env.kind === "mcp/withdraw") {
      for (const id of env.correlation_id ?? []) {
        const r = requests.get(`${f.who} ${id}`);
        if (r) r.cancelled = true;
      }
    }
    if (f.dir === "→" && env.kind === "mcp/request" && env.id) {
      const method = env.payload?.method ?? "";
      if (method === "notifications/cancelled") {
        for (const id of env.correlation_id ?? []) {
          const r = requests.get(`${f.who} ${id}`);
          if (r) r.cancelled = true;
        }
      } else if (!method.startsWith("notifications/") && env.payload?.id !== undefined) {
        requests.set(`${f.who} ${env.id}`, { who: f.who, answers: 0, cancelled: false });
      }
    }
    // A proposal held for approval that no approval could ever route (a cycle) is a gateway bug.
    if (
      f.dir === "←" &&
      env.kind === "system/error" &&
      (env.payload as { code?: string } | undefined)?.code === "cycle_detected" &&
      env.correlation_id?.some((id) => approvals.has(id))
    ) {
      out.push(`an approval by ${f.who} could never be routed (a cycle): the proposal should have been refused`);
    }
    if (f.dir === "→" && env.kind === "mcp/approve" && env.id) approvals.add(env.id);
    // An answer: a response, a refusal, or — for a call held as a proposal — its rejection (or expiry).
    if (f.dir === "←" && (env.kind === "mcp/response" || env.kind === "system/error" || env.kind === "mcp/reject")) {
      // One answer per envelope, to the first request of this participant it correlates to.
      for (const id of env.correlation_id ?? []) {
        const r = requests.get(`${f.who} ${id}`);
        if (r) {
          r.answers++;
          break;
        }
      }
    }
  }
  for (const [key, r] of requests) {
    if (r.answers > 1) out.push(`request ${key} was answered ${r.answers} times`);
    if (r.answers === 0 && !r.cancelled && !left.has(r.who)) out.push(`request ${key} never ended`);
  }
  for (const [id, events] of run.proposals) {
    if (!events.some((e) => ENDED.has(e)))
      out.push(`proposal ${id} was announced and is gone (${events.join(", ") || "not in the audit trail"})`);
  }
  return out;
}
