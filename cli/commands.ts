/**
 * One-shot commands against a running space: `tools`, `send`, `proposals`, and `audit`
 * (which only reads the state directory).
 */
import { selfCommand } from "./invocation.js";
import { existsSync, statSync } from "node:fs";
import type { AuditEntry } from "../gateway/index.js";
import { readAudit } from "../gateway/index.js";
import { GATEWAY_ID, type Envelope } from "../gateway/index.js";
import type { ParticipantClient } from "../participants/index.js";
import { guard, processIo, proposalLine, type Io } from "./lifecycle.js";
import { ApiClient, asEnvelope } from "./api.js";
import { openClient, resolveTarget, type RemoteOptions, type ResolveRules } from "./remote.js";
import { CliError, loadSpace, spaceFile } from "./space.js";
import { callShape, interruption, oneLine, PLAIN, shortId, summarizeResult, truncate } from "./terminal/format.js";
import { isRecord } from "../gateway/index.js";
import { ProposalQueue } from "./terminal/queue.js";
import { schemaProblem } from "./terminal/validate.js";
import { decidedLines } from "./card-text.js";
import { decidedAlready, showProposal } from "./proposal-show.js";

/** Resolves the target and runs `body` against the operator API: nothing joins. */
export async function withApi<T>(opts: RemoteOptions, io: Io, body: (api: ApiClient) => Promise<T>, rules?: ResolveRules): Promise<T> {
  return body(new ApiClient(await resolveTarget(withEnvDefaults(opts, io.env), io.env, rules)));
}

/** Connects, runs `body`, and always leaves the space. */
async function withClient<T>(opts: RemoteOptions, io: Io, body: (client: ParticipantClient) => Promise<T>): Promise<T> {
  const client = await openClient(await resolveTarget(withEnvDefaults(opts, io.env), io.env));
  try {
    return await body(client);
  } finally {
    await client.close();
  }
}

/**
 * Without `--config`, `--gateway/--space/--token` fall back to MEWGATE_URL, MEWGATE_SPACE
 * and MEWGATE_TOKEN: what `up` gives a `run:` child, so a child can be `mewgate bridge …`.
 */
export function withEnvDefaults(opts: RemoteOptions, env: NodeJS.ProcessEnv): RemoteOptions {
  if (opts.config) return opts;
  if (!opts.gateway && !opts.space && !opts.token && !opts.tokenFile && !env["MEWGATE_URL"]) return opts;
  return {
    ...opts,
    gateway: opts.gateway ?? env["MEWGATE_URL"],
    space: opts.space ?? env["MEWGATE_SPACE"],
    token: opts.token ?? (opts.tokenFile ? undefined : env["MEWGATE_TOKEN"]),
  };
}

/**
 * Sends one envelope and waits until the gateway has processed it: a `ping` to the gateway
 * sent after it is answered only afterwards, so a refusal (a correlated `system/error`)
 * has arrived by then.
 */
async function sendChecked(client: ParticipantClient, env: Parameters<ParticipantClient["send"]>[0]): Promise<string> {
  let refusal: Envelope | undefined;
  let id = "";
  const off = client.on("envelope", (e) => {
    if (e.kind === "system/error" && e.correlation_id?.includes(id)) refusal ??= e;
  });
  try {
    id = client.send(env);
    await client.request(GATEWAY_ID, "ping", {}, { timeoutMs: 5000 });
  } finally {
    off();
  }
  if (refusal) {
    const p = isRecord(refusal.payload) ? refusal.payload : {};
    throw new CliError(`the gateway refused it: ${String(p["code"] ?? "error")}: ${String(p["message"] ?? "")}`);
  }
  return id;
}

// --- tools -------------------------------------------------------------------------------

export function runTools(opts: RemoteOptions & { json?: boolean }, io: Io = processIo()): Promise<number> {
  return guard(io, () =>
    withApi(
      opts,
      io,
      async (api) => {
        const tools = (await api.get<{ tools: Array<{ name: string; policy?: string; description?: string }> }>("tools")).tools;
        if (opts.json) {
          io.stdout.write(`${JSON.stringify(tools, null, 2)}\n`);
          return 0;
        }
        if (tools.length === 0) {
          io.stdout.write("no tools in the space\n");
          return 0;
        }
        const width = Math.min(40, Math.max(...tools.map((t) => t.name.length)));
        const lines = [...tools]
          .sort((a, b) => (a.name < b.name ? -1 : 1))
          .map((t) => truncate(`${t.name.padEnd(width)}  ${(t.policy ?? "?").padEnd(8)}  ${oneLine(t.description ?? "", 100)}`, 160));
        io.stdout.write(`${lines.join("\n")}\n`);
        return 0;
      },
      { readOnly: true },
    ),
  );
}

// --- send --------------------------------------------------------------------------------

export interface SendOptions extends RemoteOptions {
  to?: string[] | undefined;
  kind?: string | undefined;
  payload?: string | undefined;
}

export function runSend(text: string[], opts: SendOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const kind = opts.kind ?? "chat";
    let payload: unknown;
    if (opts.payload !== undefined) {
      try {
        payload = JSON.parse(opts.payload);
      } catch (err) {
        throw new CliError(`--payload is not JSON: ${(err as Error).message}`);
      }
      if (text.length) throw new CliError("give either text (a chat) or --payload, not both");
    } else {
      if (text.length === 0) throw new CliError(`nothing to send: mewgate send [--to id] <text>, or --kind <kind> --payload <json>`);
      if (kind !== "chat") throw new CliError(`--kind ${kind} needs --payload <json>`);
      payload = { text: text.join(" ") };
    }
    return withClient(opts, io, async (client) => {
      const to = opts.to?.flatMap((t) => t.split(",")).filter(Boolean);
      const id = await sendChecked(client, { kind, to: to?.length ? to : undefined, payload });
      // What went where, then the envelope's id (to find its answers: correlation_id).
      io.stdout.write(`sent ${kind === "chat" ? "a chat" : kind} to ${to?.length ? to.join(", ") : "everyone in the space"} (id ${id})\n`);
      return 0;
    });
  });
}

// --- proposals ---------------------------------------------------------------------------

/** `--scope exact | prefix:<field>[=<dir>]` as the approve payload's `limit`; only with --always. */
export function alwaysLimit(scope: string | undefined, always: boolean): "exact" | { field: string; prefix?: string } | undefined {
  if (scope === undefined || scope === "tool") return undefined;
  if (!always) throw new CliError("--scope limits an --always approval; add --always");
  if (scope === "exact") return "exact";
  const m = /^prefix:([^=]+)(?:=(.+))?$/.exec(scope);
  if (!m) throw new CliError(`--scope "${scope}": expected exact, or prefix:<field> (e.g. prefix:path), or prefix:<field>=<dir>`);
  return m[2] === undefined ? { field: m[1]! } : { field: m[1]!, prefix: m[2] };
}

export interface ProposalsOptions extends RemoteOptions {
  always?: boolean | undefined;
  /** With --always: `exact`, `prefix:<field>` or `prefix:<field>=<dir>` (gateway/policy/scope.ts). */
  scope?: string | undefined;
  args?: string | undefined;
  reason?: string | undefined;
  text?: string | undefined;
  json?: boolean | undefined;
  /** How long `approve` waits for the call's result. Default 10 000. */
  waitMs?: number | undefined;
}

export function runProposals(
  action: string | undefined,
  ref: string | undefined,
  opts: ProposalsOptions,
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    const verb = action ?? "list";
    if (!["list", "show", "decided", "approve", "reject", "respond"].includes(verb)) {
      throw new CliError(
        `unknown action "${verb}": ${selfCommand()} proposals [list | show <id> | decided | approve <id> | reject <id> --reason <code> | respond <id> --text <words>]`,
      );
    }
    if (verb !== "list" && verb !== "decided" && !ref)
      throw new CliError(`${selfCommand()} proposals ${verb} <id>: which proposal? (${selfCommand()} proposals lists them)`);
    let edited: Record<string, unknown> | undefined;
    if (opts.args !== undefined) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(opts.args);
      } catch (err) {
        throw new CliError(`--args is not JSON: ${(err as Error).message}`);
      }
      if (!isRecord(parsed)) throw new CliError("--args must be a JSON object");
      edited = parsed;
    }
    const limit = alwaysLimit(opts.scope, opts.always === true);
    return withApi(
      opts,
      io,
      async (api) => {
        const width = Math.max(60, Math.min(160, (process.stdout as { columns?: number }).columns ?? 100));
        if (verb === "decided") {
          const { decided } = await api.get<{ decided: Array<Record<string, unknown>> }>("proposals?state=decided&limit=50");
          io.stdout.write(opts.json ? `${JSON.stringify(decided, null, 2)}\n` : `${decidedLines(decided, PLAIN, width).join("\n")}\n`);
          return 0;
        }
        const queue = new ProposalQueue();
        const { proposals: cards } = await api.get<{ proposals: Array<Record<string, unknown>> }>("proposals");
        queue.sync(cards.map(asEnvelope));
        if (verb === "list") {
          const all = queue.all;
          // The API's proposal objects, as `show --json` and the console have them (docs/operator-api.md, A proposal in JSON).
          if (opts.json)
            io.stdout.write(
              `${JSON.stringify(
                all.map((e) => cards.find((c) => c["id"] === e.id)),
                null,
                2,
              )}\n`,
            );
          else io.stdout.write(all.length ? `${all.map(proposalLine).join("\n")}\n` : "no proposals waiting\n");
          return 0;
        }
        const found = queue.resolve(ref, `${selfCommand()} proposals list`);
        // Not waiting: perhaps decided already, which `show` draws and a decision names.
        if (!found.ok) return decidedAlready(api, ref!, verb, found.message, io, opts, width);
        const p = found.proposal;
        if (verb === "show") return showProposal(api, p, io, opts);
        const label = callShape(p).label;
        if (verb === "respond") {
          if (!opts.text) throw new CliError("respond needs --text <words> (the proposer gets them; nothing is decided)");
          await api.post(`proposals/${encodeURIComponent(p.id)}/respond`, { text: opts.text });
          io.stdout.write(`answered ${p.from} about ${label} [${shortId(p.id)}]; it still waits for a decision\n`);
          return 0;
        }
        if (verb === "reject") {
          if (!opts.reason) throw new CliError("reject needs --reason <code> (for example unsafe, disagree, not_now)");
          await api.post(
            `proposals/${encodeURIComponent(p.id)}/reject`,
            opts.text ? { reason: opts.reason, text: opts.text } : { reason: opts.reason },
          );
          io.stdout.write(`rejected ${label} [${shortId(p.id)}] from ${p.from}: ${opts.reason}${opts.text ? ` (${opts.text})` : ""}\n`);
          return 0;
        }
        // Approve, then wait a little for the result so the person sees what happened: the
        // event stream is open before the approval goes out.
        if (edited) {
          // The same check the terminal and the console make: a typo must not use up the proposal.
          const tools = (await api.get<{ tools: Array<Record<string, unknown>> }>("tools")).tools;
          const problem = schemaProblem(tools.find((t) => t["name"] === label)?.["inputSchema"], edited);
          if (problem) throw new CliError(`--args: ${problem} (the input schema of ${label}); nothing was approved`);
        }
        const { next: result } = await api.watch(
          (e) => e.kind === "mcp/response" && e.correlation_id?.includes(p.id) === true,
          opts.waitMs ?? 10_000,
        );
        const payload: Record<string, unknown> = { scope: opts.always ? "always" : "once" };
        if (edited) payload["arguments"] = edited;
        else if (isRecord(p.payload) && isRecord(p.payload["mewgate/edited"]) && isRecord(p.payload["mewgate/edited"]["arguments"])) {
          // Edited by an earlier approver: confirm the arguments the card showed, which are what runs.
          payload["arguments"] = p.payload["mewgate/edited"]["arguments"];
        }
        if (limit !== undefined) payload["limit"] = limit;
        const answer = await api.post<Record<string, unknown>>(`proposals/${encodeURIComponent(p.id)}/approve`, payload);
        // One of several approvals it needs: it still waits.
        const approvals =
          isRecord(answer) && answer["state"] === "pending" && isRecord(answer["approvals"]) ? answer["approvals"] : undefined;
        if (approvals) {
          io.stdout.write(
            `approved ${label} [${shortId(p.id)}] from ${p.from}: ${String(approvals["text"])} approvals; it waits for another approver\n`,
          );
          return 0;
        }
        const scoped =
          limit === undefined
            ? ""
            : limit === "exact"
              ? ", these arguments only"
              : `, ${limit.field} under ${limit.prefix ?? "its directory"} only`;
        io.stdout.write(
          `approved ${label}${interruption(p) ? " again" : ""} [${shortId(p.id)}] from ${p.from}${opts.always ? ` (always${scoped})` : ""}${edited ? " with edited arguments" : ""}\n`,
        );
        const response = await result;
        if (!response) io.stdout.write("(no result yet; it goes to the proposer)\n");
        else {
          const r = isRecord(response.payload) ? response.payload : {};
          const error = isRecord(r["error"]) ? r["error"] : undefined;
          // A tool that reports its own failure answers with a result marked isError: say so.
          const toolError = !error && isRecord(r["result"]) && r["result"]["isError"] === true;
          if (error) io.stdout.write(`call failed: ${oneLine(String(error["message"]), 200)}\n`);
          else
            io.stdout.write(
              `${toolError ? "call failed (the tool reported an error)" : "result"}: ${oneLine(summarizeResult(r["result"]), 200)}\n`,
            );
        }
        return 0;
      },
      { readOnly: verb === "list" || verb === "show" || verb === "decided" },
    );
  });
}

// --- switching specialists off and on ----------------------------------------------------

/** `mewgate disable|enable <participant>`: switches a specialist off (its tools leave every catalogue) or back on. */
export function runSwitch(
  verb: "disable" | "enable",
  id: string,
  opts: RemoteOptions & { reason?: string },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () =>
    withApi(opts, io, async (api) => {
      await api.post(`participants/${encodeURIComponent(id)}/${verb}`, opts.reason ? { reason: opts.reason } : {});
      io.stdout.write(
        verb === "disable" ? `${id} is switched off: its tools are offered to nobody until it is enabled\n` : `${id} is switched on\n`,
      );
      return 0;
    }),
  );
}

// --- grants ------------------------------------------------------------------------------

/** `mewgate grants [list | revoke <id>]`: the grants held in the space (always-approvals among them), and taking one back. */
export function runGrants(
  action: string | undefined,
  ref: string | undefined,
  opts: RemoteOptions & { json?: boolean },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    const verb = action ?? "list";
    if (!["list", "revoke"].includes(verb)) throw new CliError(`unknown action "${verb}": ${selfCommand()} grants [list | revoke <id>]`);
    return withApi(
      opts,
      io,
      async (api) => {
        const grants = (
          await api.get<{
            grants: Array<{
              id: string;
              from: string;
              recipient: string;
              capabilities: unknown[];
              reason?: string;
              ts: string;
              standing: boolean;
              limited_to?: string;
            }>;
          }>("grants")
        ).grants;
        if (verb === "list") {
          if (opts.json) io.stdout.write(`${JSON.stringify(grants, null, 2)}\n`);
          else if (grants.length === 0) io.stdout.write("no grants\n");
          else {
            const lines = grants.map((g) =>
              truncate(
                `  [${shortId(g.id)}] ${g.from} → ${g.recipient}: ${oneLine(g.capabilities, 80)}${g.limited_to ? ` [${oneLine(g.limited_to, 80)}]` : ""}${g.reason ? ` (${oneLine(g.reason, 60)})` : ""}${g.standing ? "" : " [not standing]"}`,
                240,
              ),
            );
            io.stdout.write(`${lines.join("\n")}\n`);
          }
          return 0;
        }
        if (!ref) throw new CliError(`${selfCommand()} grants revoke <id>: which grant? (${selfCommand()} grants lists them)`);
        const matches = grants.filter((g) => g.id === ref || g.id.startsWith(ref));
        if (matches.length !== 1)
          throw new CliError(
            matches.length
              ? `"${ref}" matches ${matches.length} grants; give more of the id`
              : `no grant "${ref}" (${selfCommand()} grants lists them)`,
          );
        const g = matches[0]!;
        await api.delete(`grants/${encodeURIComponent(g.id)}`);
        io.stdout.write(`revoked [${shortId(g.id)}] ${g.from} → ${g.recipient}, and every grant lent on from it\n`);
        return 0;
      },
      { readOnly: verb === "list" },
    );
  });
}

// --- audit -------------------------------------------------------------------------------

export interface AuditOptions {
  config?: string | undefined;
  stateDir?: string | undefined;
  participant?: string | undefined;
  tool?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
  json?: boolean | undefined;
}

/** An ISO date/time, or a duration back from now: `30s`, `10m`, `2h`, `7d`. */
export function parseWhen(value: string, flag: string, now = Date.now()): Date {
  const m = /^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$/i.exec(value.trim());
  if (m) {
    const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 7 * 86400e3 }[m[2]!.toLowerCase() as "s"]!;
    return new Date(now - Number(m[1]) * unit);
  }
  const t = Date.parse(value);
  if (Number.isNaN(t))
    throw new CliError(`${flag} "${value}": expected a date (2025-01-31, 2025-01-31T12:00Z) or a duration back from now (30m, 2h, 7d)`);
  return new Date(t);
}

export function runAudit(opts: AuditOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const since = opts.since ? parseWhen(opts.since, "--since") : undefined;
    const until = opts.until ? parseWhen(opts.until, "--until") : undefined;
    const stateDir =
      opts.stateDir && !opts.config
        ? opts.stateDir
        : (await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env })).stateDir;
    const entries = readAudit(stateDir, { participant: opts.participant, tool: opts.tool, since, until });
    // A listing is only as good as the chain under it: a break is said, and the exit is 1.
    const { chainBreak } = await import("./audit-verify.js");
    const broken = chainBreak(stateDir);
    if (opts.json) {
      for (const e of entries) io.stdout.write(`${JSON.stringify(e)}\n`);
    } else if (entries.length === 0) {
      io.stdout.write(`no audit entries${opts.participant || opts.tool || since || until ? " match" : ` in ${stateDir}`}\n`);
    } else io.stdout.write(`${entries.map(auditLine).join("\n")}\n`);
    if (broken) {
      io.stderr.write(
        `mewgate: ${broken}; the entries above stop short of it or cannot be trusted past it (${selfCommand()} audit verify says more)\n`,
      );
      return 1;
    }
    return 0;
  });
}

/**
 * `mewgate state repair`: a journal with a corrupt frame stops the gateway from starting
 * (it says where). This keeps every transaction before that frame and moves the rest
 * aside, for whoever wants to look at it. Run it with the gateway stopped.
 */
export function runStateRepair(
  opts: { config?: string | undefined; stateDir?: string | undefined },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    // `state repair <dir>` names the state directory itself, as `--state-dir <dir>` does.
    const isDir = opts.config !== undefined && existsSync(opts.config) && statSync(opts.config).isDirectory();
    const stateDir = isDir
      ? opts.config!
      : opts.stateDir && !opts.config
        ? opts.stateDir
        : (await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env })).stateDir;
    const { repairSpaceState } = await import("../gateway/space/repair.js");
    const r = repairSpaceState(stateDir);
    if (r.movedTo === undefined)
      io.stdout.write(`mewgate: the journal in ${stateDir} reads whole (${r.kept} transactions); nothing to repair\n`);
    else {
      io.stdout.write(
        `mewgate: kept ${r.kept} transactions; the journal was unreadable from byte ${r.offset}, and what followed is in ${r.movedTo}\n`,
      );
      if (r.ended.length > 0)
        io.stdout.write(
          `mewgate: ${r.ended.length} proposal(s) whose later records were dropped end as failed rather than come back pending: ${r.ended.slice(0, 20).join(", ")}${r.ended.length > 20 ? ", …" : ""}\n`,
        );
      io.stdout.write(`mewgate: the repair is in the audit trail (${selfCommand()} audit verify lists it)\n`);
    }
    return 0;
  });
}

export function auditLine(e: AuditEntry): string {
  const tool = e.tool ? `${e.owner}/${e.tool}` : `${e.owner}: ${e.method}`;
  // A tool's definition changed (tools/pins.ts): no proposal, its owner announced it.
  if (e.event === "tool_changed") return [e.ts, e.event, tool, oneLine((e.changes ?? []).join("; "), 160)].join("  ");
  if (e.event === "rule_accepted")
    return [e.ts, e.event, `by ${e.proposer}`, `for ${e.owner}`, oneLine((e.changes ?? []).join("; "), 240)].join("  ");
  if (e.event === "repaired") return [e.ts, e.event.padEnd(9), oneLine((e.changes ?? []).join("; "), 240)].join("  ");
  if (e.event === "called")
    return [
      e.ts,
      e.event.padEnd(9),
      `${e.proposer} → ${tool}`,
      `allowed by ${e.scope ?? "?"}`,
      e.arguments !== undefined ? oneLine(e.arguments, 80) : `arguments sha256 ${String(e.arguments_digest ?? "").slice(0, 16)}`,
    ].join("  ");
  if (e.event === "reloaded") return [e.ts, e.event.padEnd(9), `by ${e.proposer}`, oneLine((e.changes ?? []).join("; "), 200)].join("  ");
  const parts = [e.ts, e.event.padEnd(9), `[${shortId(e.proposal)}]`, `${e.proposer} → ${tool}`];
  if (e.by) parts.push(`by ${e.by}`);
  if (e.scope && e.event === "approved") parts.push(`(${e.scope})`);
  if (e.reason) parts.push(`reason: ${e.reason}`);
  if (e.outcome) parts.push(`outcome: ${e.outcome}`);
  if (e.event === "proposed" && e.arguments !== undefined) parts.push(oneLine(e.arguments, 80));
  if (e.event === "approval_dropped" && e.text) parts.push(oneLine(e.text, 160));
  if (e.event === "escalated")
    parts.push(`stage ${e.stage ?? "?"}: ${oneLine((e.approvers ?? []).join(", ") || "nobody more", 160)} may decide`);
  return parts.join("  ");
}
