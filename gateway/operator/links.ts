/**
 * The API side of decision links (proposals/links.ts), for the page `ui/link.html`:
 *
 *   POST links/open   {link}                              → {proposal, confirm}
 *   POST links/decide {link, confirm, decision, text?}    → {ok, state}
 *   POST links/preview {link}                             → the preview (proposals/preview.ts)
 *
 * Both are called with the approver's own session (`Authorization: Bearer`, as every API
 * route): a link made for someone else, or one whose proposal has moved on or whose
 * arguments changed, decides nothing. The link travels in the body, never in a URL that a
 * proxy would log. `confirm` is what `open` gave the page; `decide` marks the link used
 * (durably) before it decides, so it works once, whatever happens next.
 */
import type { LinkClaims } from "../proposals/links.js";
import { Links } from "../proposals/links.js";
import { type Proposal, whatRuns } from "../proposals/book.js";
import type { Space } from "../space/space.js";
import { proposalView } from "./views.js";

type Reply = { status: number; body: unknown };

const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });

/** The link's claims if `caller` may use it now on a proposal that still waits, unchanged; else the refusal. */
function usable(space: Space, caller: string, link: unknown): { claims: LinkClaims; p: Proposal } | Reply {
  const check = space.aids.links.check(link);
  if (!check.ok) return fail(check.code === "link_invalid" ? 400 : 410, check.code, check.message);
  const { claims } = check;
  if (claims.a !== caller)
    return fail(403, "link_not_yours", `this link was made for ${claims.a}; sign in as them, or decide in the console as yourself`);
  const p = space.proposals.pending().find((x) => x.id === claims.p);
  if (!p) return fail(410, "proposal_not_pending", "the proposal this link decides is no longer waiting for a decision");
  if (Links.digest(p) !== claims.d)
    return fail(409, "link_stale", "the call changed since this link was made (its arguments or tool); decide it in the console");
  return { claims, p };
}

/** The link page showed what runs (its digest says so): an approval by link confirms edited arguments. */
function confirmed(p: Proposal): { arguments?: Record<string, unknown> } {
  const runs = whatRuns(p);
  return runs.edited ? { arguments: runs.arguments } : {};
}

export async function linkRoute(
  space: Space,
  caller: string,
  route: "open" | "decide" | "preview",
  body: Record<string, unknown>,
): Promise<Reply> {
  const u = usable(space, caller, body["link"]);
  if ("status" in u) return u;
  const { claims, p } = u;
  // What the call would change, read as the link's person: the card's preview on the link page.
  if (route === "preview") return { status: 200, body: await space.aids.previews.of(p, caller) };
  if (route === "open")
    return {
      status: 200,
      body: {
        proposal: proposalView(space, caller, p),
        confirm: space.aids.links.confirmation(claims),
        expiresAt: new Date(claims.e).toISOString(),
      },
    };
  if (!space.aids.links.confirms(claims, body["confirm"]))
    return fail(403, "link_unconfirmed", "a decision by link is made from the link's page (open it again)");
  const decision = body["decision"];
  if (decision !== "approve" && decision !== "reject") return fail(400, "invalid_payload", 'decision must be "approve" or "reject"');
  try {
    if (!space.aids.links.use(claims)) return fail(410, "link_used", "this link was already used; a link decides once");
  } catch (err) {
    return fail(
      503,
      "store_failed",
      `the link could not be marked used, so nothing was decided: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  const text = typeof body["text"] === "string" ? body["text"].slice(0, 2000) : undefined;
  const frame =
    decision === "approve"
      ? { kind: "mcp/approve", correlation_id: [p.id], payload: { scope: "once", reason: "approved by link", ...confirmed(p) } }
      : { kind: "mcp/reject", correlation_id: [p.id], payload: { reason: "disagree", ...(text ? { text } : {}) } };
  const errors = await space.seats.act(caller, frame);
  const e = errors[0];
  if (e) return { status: 409, body: { error: { ...e, code: String(e["code"] ?? "error"), message: String(e["message"] ?? "refused") } } };
  return { status: 200, body: { ok: true, state: decision === "approve" ? "approved" : "rejected", proposal: p.id } };
}
