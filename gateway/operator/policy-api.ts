/**
 * The operator API's policy routes (api.ts routes them here):
 *
 *   GET policy/explain?caller=<id>&tool=<participant/tool>[&args=<JSON object>]
 *       why that call is direct, a proposal or denied: the decision, the rule (with its line)
 *       or grant that made it, which condition decided, who could approve it. Computed by
 *       the one decision point (policy/authority.ts `explain`, which asks `call`).
 *   GET policy/check
 *       the findings about the space's tool rules (policy/check.ts), with the tools
 *       registered so far.
 *   GET policy/caps
 *       the space's caps (space.yaml `caps:`) and each one's use this minute, by subject
 *       (policy/caps.ts); a participant sees its own rows, a human all of them.
 *
 * A participant may explain its own calls; a human may explain anyone's and read the findings
 * (they show the rules, which other participants need not see).
 */
import { checkPolicy } from "../policy/check.js";
import type { Space } from "../space/space.js";

type Reply = { status: number; body: unknown };

const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });
/** The most of `args` accepted in a query, in characters. */
const MAX_ARGS = 64 * 1024;

function isHuman(space: Space, id: string): boolean {
  return space.config.participants[id]?.kind === "human";
}

export function explainRoute(space: Space, me: string, q: URLSearchParams): Reply {
  const caller = q.get("caller") ?? me;
  const tool = q.get("tool");
  if (caller !== me && !isHuman(space, me)) return fail(403, "forbidden", "only a human may explain another participant's calls");
  if (!space.config.participants[caller])
    return fail(404, "unknown_participant", `no participant ${JSON.stringify(caller.slice(0, 64))} in space "${space.id}"`);
  const slash = tool?.indexOf("/") ?? -1;
  if (!tool || slash <= 0 || slash === tool.length - 1)
    return fail(400, "invalid_payload", "give tool=<participant>/<tool>, e.g. tool=files/write_file");
  const raw = q.get("args");
  let args: Record<string, unknown> = {};
  if (raw !== null) {
    if (raw.length > MAX_ARGS) return fail(400, "invalid_payload", `args is ${raw.length} characters; at most ${MAX_ARGS}`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      return fail(400, "invalid_payload", "args must be a JSON object");
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      return fail(400, "invalid_payload", "args must be a JSON object");
    args = parsed as Record<string, unknown>;
  }
  return { status: 200, body: space.authority.explain(caller, tool.slice(0, slash), tool.slice(slash + 1), args) };
}

export function capsRoute(space: Space, me: string): Reply {
  const uses = space.authority.caps.uses();
  const human = isHuman(space, me);
  // Anyone else sees the caps that count its calls, and its own rows (its own tools' included).
  const mine = (subject: string) => subject === me || subject.startsWith(`${me}/`);
  const caps = space.config.caps
    .map((c, i) => ({ name: c.name ?? `caps[${i}]`, ...c }))
    .filter((c) => human || c.callers.includes("*") || space.authority.groups.names(c.callers, me));
  return {
    status: 200,
    body: {
      minute: new Date(Math.floor(Date.now() / 60_000) * 60_000).toISOString(),
      caps,
      uses: human ? uses : uses.filter((u) => mine(u.subject)),
    },
  };
}

/** The caps' use this minute in Prometheus text, for `/metrics` (metrics-route.ts). */
export function capMetrics(spaces: readonly Space[]): string {
  const label = (l: Record<string, string>) =>
    `{${Object.entries(l)
      // Names come from space.yaml and from servers' tool lists: anything that could end a label is replaced.
      .map(([k, v]) => `${k}="${v.replace(/[\u0000-\u001f\u007f"\\]/g, "_").slice(0, 200)}"`)
      .join(",")}}`;
  const out: string[] = [];
  const rows = spaces.flatMap((s) =>
    s.authority.caps.uses().map((u) => ({ l: { space: s.id, cap: u.cap, per: u.per, subject: u.subject }, u })),
  );
  const metric = (name: string, help: string, pick: (u: (typeof rows)[number]["u"]) => number | undefined) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
    for (const { l, u } of rows) {
      const v = pick(u);
      if (v !== undefined) out.push(`${name}${label(l)} ${v}`);
    }
  };
  metric("mewgate_cap_calls", "Calls counted against a cap this minute, by cap and subject", (u) => u.calls);
  metric("mewgate_cap_cost", "Cost counted against a cap this minute, by cap and subject", (u) => u.cost);
  metric("mewgate_cap_calls_limit", "A cap's calls per minute", (u) => u.calls_per_minute);
  metric("mewgate_cap_cost_limit", "A cap's cost per minute", (u) => u.cost_per_minute);
  return `${out.join("\n")}\n`;
}

export function checkRoute(space: Space, me: string): Reply {
  if (!isHuman(space, me)) return fail(403, "forbidden", "only a human may read the policy findings");
  const findings = checkPolicy(space.config, space.registry);
  return {
    status: 200,
    body: {
      findings,
      errors: findings.filter((f) => f.severity === "error").length,
      warnings: findings.filter((f) => f.severity === "warning").length,
    },
  };
}
