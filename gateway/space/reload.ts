/**
 * Reload without restart: a space takes a new space.yaml (and the tokens that go with it)
 * while it runs. The caller (edge/server.ts `Gateway.reload`) parses and validates the
 * whole file with the same code as a start (config/config.ts) and loads the tokens the
 * same way (identity/tokens.ts); an invalid file throws there, with `file:line:col`, and
 * nothing here runs. This module then:
 *
 *   1. works out what changed — participants added, removed, changed; which top-level
 *      sections changed; whose token changed — never a token's value;
 *   2. writes that summary to the audit trail (`event: "reloaded"`), and only once it is
 *      written
 *   3. swaps: the space's config object is changed in place, section by section, so every
 *      module that holds it sees the new one; keys other engineers add to space.yaml
 *      (groups, rule conditions, previews) flow through without a line here. What was
 *      compiled from the old rules is dropped (`Authority.reset`), grants are re-checked;
 *   4. acts on the connected: a member whose participant is gone, or whose token the new
 *      book no longer admits, is closed (4412 `token_revoked`); a member whose rules
 *      changed gets its capabilities compiled again and a fresh welcome, and a
 *      `capability/revoke` from the gateway saying what happened;
 *   5. re-checks pending proposals (proposals/standing.ts): one whose proposer is gone, or
 *      whose call the new policy denies — asked with the arguments that would run, so a
 *      `deny` with `when:` holds — is cancelled (rejected with reason `policy_changed`, told
 *      to the proposer); one that would now be direct stays a proposal — someone still
 *      decides. An approval already given by someone removed, or no longer able to decide,
 *      is dropped (written, then its card and those who gave it are told): a two-approval
 *      call is never routed by one remaining person;
 *   6. ends every other session opened with a token the new book no longer admits: event
 *      streams and MCP sessions (space/sessions.ts `revoke`).
 *
 * `gateway.*` (address, limits, state directory) is read at start only: a change there is
 * reported (`needs_restart`) and not applied. Invited participants (agents/invites.ts) and
 * their tokens are kept.
 */
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import type { TokenBook } from "../identity/tokens.js";
import type { Authority } from "../policy/authority.js";
import { canonical } from "../store/chain.js";
import type { Member } from "../ports/member.js";
import type { Plan } from "../store/plan.js";
import type { ProposalBook } from "../proposals/book.js";
import type { AuditRecord } from "../audit/entry.js";
import type { Verdict } from "../policy/authority.js";
import type { StandingHost } from "../proposals/standing.js";
import { standAfterReload } from "../proposals/still-count.js";
import { CloseCodes, type Envelope, systemEnvelope } from "../wire/envelope.js";

export interface ReloadHost {
  readonly id: string;
  readonly config: SpaceConfig;
  readonly log: Logger;
  readonly tokens: TokenBook;
  readonly authority: Authority;
  readonly proposals: ProposalBook;
  members(): Iterable<Member>;
  record(...plans: Plan[]): Promise<void>;
  deliver(env: Envelope): void;
  /** Recompiles a member's capabilities and sends it a fresh welcome. */
  refresh(id: string): void;
  /** Grants are checked again against the new rules; those that no longer stand. */
  revalidateGrants(): Array<{ id: string; recipient: string }>;
  /** The tokens changed: sessions other than members' (event streams, MCP sessions) opened with a token no longer admitted are ended, as "id (what)"; the expiry sweep is set again. */
  tokensChanged(): string[];
  /** The decision point for `caller` making a call now, connected or not, with its capabilities as they stand. */
  verdict(caller: string, owner: string, method: string, params: Record<string, unknown>, confirming: boolean): Verdict;
}

export interface ReloadReport {
  space: string;
  by: string;
  added: string[];
  removed: string[];
  changed: string[];
  /** Participants whose token changed (rotated, revoked, expiry set): ids only. */
  tokens: string[];
  /** Top-level sections of space.yaml that changed (besides `participants`). */
  sections: string[];
  /** Sections read only at start, changed in the file: not applied. */
  needs_restart: string[];
  /** Members closed because their token is no longer accepted or their participant is gone. */
  closed: string[];
  /** Members told their rights changed. */
  told: string[];
  /** Pending proposals cancelled because the new policy denies them. */
  cancelled: string[];
  /** Grants that no longer stand. */
  grants_fallen: string[];
  /** Approvals of pending proposals dropped, their approver removed or no longer able to decide: "proposal: who (why)". */
  approvals_dropped: string[];
  /** What the new file's tool rules were found to hold short of an error (policy/check.ts), as lines. */
  findings: string[];
}

/** Sections a reload does not apply: read once when the gateway starts. */
const AT_START = new Set(["gateway", "file"]);

export async function applyReload(host: ReloadHost, next: SpaceConfig, tokens: TokenBook, by: string): Promise<ReloadReport> {
  const cur = host.config;
  if (next.space.id !== cur.space.id)
    throw new Error(`the file now names space "${next.space.id}", not "${cur.space.id}": a reload cannot rename a space`);
  // Runtime participants (invites) are not in the file: they stay.
  for (const [id, p] of Object.entries(cur.participants))
    if (p.invitedBy !== undefined && !(id in next.participants)) next.participants[id] = p;
  const report: ReloadReport = {
    space: host.id,
    by,
    added: [],
    removed: [],
    changed: [],
    tokens: [],
    sections: [],
    needs_restart: [],
    closed: [],
    told: [],
    cancelled: [],
    grants_fallen: [],
    approvals_dropped: [],
    findings: [],
  };
  for (const id of Object.keys(next.participants)) if (!(id in cur.participants)) report.added.push(id);
  for (const id of Object.keys(cur.participants)) {
    if (!(id in next.participants)) report.removed.push(id);
    else if (canonical(cur.participants[id]) !== canonical(next.participants[id])) report.changed.push(id);
  }
  for (const key of new Set([...Object.keys(cur), ...Object.keys(next)])) {
    if (key === "participants") continue;
    const a = (cur as Record<string, unknown>)[key];
    const b = (next as Record<string, unknown>)[key];
    if (canonical(a) === canonical(b)) continue;
    (AT_START.has(key) ? report.needs_restart : report.sections).push(key);
  }
  for (const id of Object.keys(next.participants)) {
    if (id in cur.participants && tokenState(host.tokens, id) !== tokenState(tokens, id)) report.tokens.push(id);
  }

  // Durable first: if the audit record cannot be written, nothing changes.
  const audit: AuditRecord = {
    type: "audit",
    entry: {
      ts: new Date().toISOString(),
      event: "reloaded",
      proposal: "",
      proposer: by,
      owner: "system:gateway",
      method: "reload",
      changes: summary(report),
    },
  };
  await host.record({ records: [audit], apply: () => {} });

  // The swap: the same object, new sections (but not those read at start).
  for (const key of Object.keys(next) as Array<keyof SpaceConfig>) {
    if (AT_START.has(key)) continue;
    (cur as Record<string, unknown>)[key] = next[key];
  }
  host.tokens.replaceWith(tokens);
  host.authority.reset();
  const fell = host.revalidateGrants();
  report.grants_fallen = fell.map((g) => g.id);

  const affected = new Set([...report.changed, ...fell.map((g) => g.recipient)]);
  for (const m of [...host.members()]) {
    const p = cur.participants[m.id];
    if (!p) {
      report.closed.push(m.id);
      m.peer.close(CloseCodes.tokenRevoked, "you were removed from the space (reload)");
      continue;
    }
    if (m.tokenDigest !== undefined && !host.tokens.admits(m.id, m.tokenDigest)) {
      report.closed.push(m.id);
      m.peer.close(CloseCodes.tokenRevoked, "your token is no longer accepted (rotated, revoked or expired); connect with the new one");
      continue;
    }
    if (!affected.has(m.id)) continue;
    m.config = p;
    host.refresh(m.id);
    report.told.push(m.id);
    host.deliver(
      systemEnvelope(
        "capability/revoke",
        {
          recipient: m.id,
          reason: "policy_changed",
          text: "the space's rules were reloaded; your capabilities and tools are in the new welcome",
        },
        { to: [m.id] },
      ),
    );
  }

  // What the new rules mean for proposals waiting on a person is proposals/'s to plan (still-count.ts).
  const standing: StandingHost = { config: cur, groups: host.authority.groups, verdict: (...a) => host.verdict(...a) };
  const after = await standAfterReload(host, host.proposals, standing);
  report.cancelled.push(...after.cancelled);
  report.approvals_dropped.push(...after.dropped);
  report.closed.push(...host.tokensChanged());
  host.log.info({ ...report }, "space reloaded");
  return report;
}

/** A participant's token as a comparable string: digests and expiries, never tokens. */
function tokenState(book: TokenBook, id: string): string {
  return book.describe(id);
}

function summary(r: ReloadReport): string[] {
  const out: string[] = [];
  if (r.added.length) out.push(`participants added: ${r.added.join(", ")}`);
  if (r.removed.length) out.push(`participants removed: ${r.removed.join(", ")}`);
  if (r.changed.length) out.push(`participants changed: ${r.changed.join(", ")}`);
  if (r.tokens.length) out.push(`tokens changed: ${r.tokens.join(", ")}`);
  if (r.sections.length) out.push(`sections changed: ${r.sections.join(", ")}`);
  if (r.needs_restart.length) out.push(`not applied until a restart: ${r.needs_restart.join(", ")}`);
  if (!out.length) out.push("no change");
  return out;
}
