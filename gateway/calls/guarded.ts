/**
 * The space's guards (policy/guards.ts) where a call leaves and where its answer comes back,
 * for the router (router.ts): every call to a participant goes out through `tryRoute` and every
 * answer comes in through `onResponse`, whichever path it took (a request, `system:gateway`,
 * an approval, a fulfilment, a grant), so these two are where a redaction is applied. The
 * decision (hold, deny) is the decision point's (policy/authority.ts); this only carries out
 * what it says, and writes what it did into the audit (guard-audit.ts). The caps
 * (policy/caps.ts) meet an approved call here too: a cap that refuses still refuses it.
 */
import type { Call } from "./calls.js";
import { guardPlan } from "./guard-audit.js";
import { summary } from "../policy/guards.js";
import type { GuardVerdict } from "../policy/guards.js";
import type { CapBreach, Caps } from "../policy/caps.js";
import { clip, type NotRouted, type RouterHost } from "../ports/host.js";
import { type Envelope, ErrorCodes, GATEWAY_ID, type McpRequestPayload, RpcErrors } from "../wire/envelope.js";

/** The refusal of an approved call that a cap refusing (`action: refuse`) does not let leave: counted for `approver` where it counts persons. */
export function capRefusal(caps: Caps, caller: string, owner: string, tool: string, approver: string | undefined): NotRouted | undefined {
  const breach = caps.over(caller, owner, tool, { approver, only: "refuse" });
  if (!breach) return undefined;
  return {
    code: ErrorCodes.capExceeded,
    message: `a cap of the space is reached (${breach.text}); an approval does not lift a cap that refuses: try again next minute`,
    extra: { tool: `${owner}/${tool}`, cap: breach },
  };
}

/** What a caller is told of a call a guard (or a cap) holds for a person: the message and the findings (masked). */
export function heldRefusal(
  name: string,
  held: { guard?: GuardVerdict | undefined; cap?: CapBreach | undefined },
): { message: string; extra: Record<string, unknown> } {
  const why =
    held.guard?.action === "hold"
      ? `a guard of the space holds it for a person (${summary(held.guard.findings)})`
      : `a cap of the space is reached (${held.cap?.text}), so it waits for a person`;
  return {
    message: `${clip(name)} needs approval: ${why}; send it as an mcp/proposal (same method and params), or call it through ${GATEWAY_ID}, which proposes it for you`,
    extra: {
      tool: name,
      ...(held.guard?.action === "hold" ? { findings: held.guard.findings } : {}),
      ...(held.cap ? { cap: held.cap } : {}),
    },
  };
}

/** The request as it goes out: its arguments redacted where a guard says so (and `env` updated), or why it may not go. */
export function guardArguments(
  space: Pick<RouterHost, "authority" | "note">,
  env: Envelope,
  payload: McpRequestPayload,
  target: string,
  tool: string,
  proposal: string | undefined,
): McpRequestPayload | NotRouted {
  const guard = space.authority.guards.screen(env.from, target, tool, payload.params?.["arguments"] ?? {}, "arguments");
  if (!guard) return payload;
  // Decided before (authority.ts); asked again here so no path can route what a guard denies.
  if (guard.action === "deny")
    return {
      code: ErrorCodes.guardDenied,
      message: `a guard of the space denies this call: ${summary(guard.findings)}`,
      extra: { findings: guard.findings },
    };
  if (guard.redacted === undefined) return payload;
  const out = { ...payload, params: { ...payload.params, arguments: guard.redacted } };
  env.payload = out;
  const redacted = { ...guard, action: "redact" as const, findings: guard.findings.filter((f) => f.action === "redact") };
  void space.note(guardPlan({ id: env.id, caller: env.from, target, tool, on: "arguments", verdict: redacted, proposal }));
  return out;
}

/**
 * A tool's result as its caller may have it: undefined when the guards find nothing; else the
 * result redacted, or an error in its place (`deny`), the guard's doing audited. A task's
 * result (`tasks/result`) is read as its tool's would be.
 */
export function screenResult(
  space: Pick<RouterHost, "authority" | "note">,
  call: Call,
  response: { result?: unknown; error?: unknown; id?: unknown },
): Record<string, unknown> | undefined {
  if (response.result === undefined || (call.method !== "tools/call" && call.method !== "tasks/result")) return undefined;
  const guards = space.authority.guards;
  if (!guards.any) return undefined;
  const tool = call.tool ?? call.method;
  const verdict = guards.screen(call.caller, call.target, tool, response.result, "results");
  if (!verdict) return undefined;
  void space.note(
    guardPlan({ id: call.id, caller: call.caller, target: call.target, tool, on: "results", verdict, proposal: call.proposalId }),
  );
  if (verdict.action === "deny")
    return {
      jsonrpc: "2.0",
      id: response.id ?? call.rpcId,
      error: {
        code: RpcErrors.failed,
        message: `a guard of the space withheld the result of ${call.target}/${tool}: ${summary(verdict.findings)}`,
        data: { reason: "guard", target: call.target, findings: verdict.findings },
      },
    };
  return { jsonrpc: "2.0", id: response.id ?? call.rpcId, result: verdict.redacted };
}
