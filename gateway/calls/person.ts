/**
 * The person a routed call acts for, stamped by the gateway on the request it routes
 * (`params._meta["mewgate/person"]`), so a bridge signing in with each person's own
 * upstream identity (`oauth: {as: caller}`, participants/bridge/oauth*.ts) knows whose
 * credentials the call may use. Only the gateway writes it: whatever a participant put
 * under that key is dropped from every request it routes, stamped or not.
 *
 * Who it is: for a held call, the person whose approval let it run (the final approver);
 * for a call nobody held, the caller itself when the caller is a person (kind `human`).
 * An agent's unheld call acts for nobody: a server that needs a person's own sign-in then
 * refuses it with a clear error (hold the tool in policy so that an approver's identity
 * is the one used).
 */
import type { SpaceConfig } from "../config/config.js";
import type { McpRequestPayload } from "../wire/envelope.js";

export const PERSON_META_KEY = "mewgate/person";

/** Does `target` want the person stamped: a `url:` server signing in as each caller's person. */
export function wantsPerson(config: SpaceConfig, target: string): boolean {
  const oauth = config.participants[target]?.mcp?.oauth;
  return oauth !== undefined && oauth !== false && oauth.as === "caller";
}

/** The person a call acts for (see the top of this file), or undefined when there is none. */
export function personFor(config: SpaceConfig, caller: string, approver: string | undefined): string | undefined {
  const who = approver ?? caller;
  return config.participants[who]?.kind === "human" ? who : undefined;
}

/** The `_meta` key of an approved call's signed receipt (proposals/receipts.ts): the gateway's to set, like the person. */
export const RECEIPT_META_KEY = "mewgate/receipt";

/**
 * `payload` with any `mewgate/person` or `mewgate/receipt` a participant put in its `_meta`
 * dropped, and the gateway's own stamps (`person`, `receipt`) in their place when given.
 * Unchanged (same object) when there is nothing to drop or add.
 */
export function stampPerson(payload: McpRequestPayload, person: string | undefined, receipt?: string): McpRequestPayload {
  const params = payload.params;
  const meta = params?.["_meta"];
  const isMeta = meta !== null && typeof meta === "object" && !Array.isArray(meta);
  const forged = isMeta && (Object.hasOwn(meta, PERSON_META_KEY) || Object.hasOwn(meta, RECEIPT_META_KEY));
  if (!forged && person === undefined && receipt === undefined) return payload;
  const rest: Record<string, unknown> = { ...(isMeta ? meta : {}) };
  delete rest[PERSON_META_KEY];
  delete rest[RECEIPT_META_KEY];
  if (person !== undefined) rest[PERSON_META_KEY] = person;
  if (receipt !== undefined) rest[RECEIPT_META_KEY] = receipt;
  const nextParams: Record<string, unknown> = { ...(params ?? {}) };
  if (Object.keys(rest).length > 0) nextParams["_meta"] = rest;
  else delete nextParams["_meta"];
  return { ...payload, params: nextParams };
}
