/**
 * The space's tools as one MCP session lists them (face/server.ts): the catalogue fetched from
 * the gateway, a slower, older answer never overwriting a newer one; a burst of the space's
 * "tools changed" coalesced into one refresh, the client told only when what it sees
 * changed; the tool a call names found, with one shared fetch for calls naming a tool not
 * in the list; and, bounded, the tools that left the catalogue since the session was shown
 * them, so that a call from a list the client still holds is answered by the gateway, which
 * says why, rather than by a bare "unknown".
 */
import type { Logger } from "pino";
import type { ParticipantClient } from "../../client.js";
import { buildCatalogue, type Catalogue, type CatalogueEntry } from "./catalogue.js";

/** Most tool names kept after they left the catalogue (`former`). */
const MAX_FORMER_TOOLS = 1024;

export class SessionTools {
  private catalogue: Catalogue | undefined;
  /**
   * Tools this session offered that have left the catalogue since (their owner was switched
   * off, or left), bounded: a client calling one from a list it still holds is answered by
   * the gateway, which says why (`participant_disabled`, `unknown_tool`), not by a bare "unknown".
   */
  private readonly former = new Map<string, CatalogueEntry>();
  private fetchSeq = 0;
  /** The fetch that calls naming a tool not in the list wait on. */
  private lookup: Promise<Catalogue> | undefined;
  private appliedSeq = 0;
  private refreshing = false;
  private refreshAgain = false;

  /**
   * `tell` sends the client `tools/list_changed`, or gives undefined when the session cannot
   * hear it now (not initialized, no transport, ended); `ended` says the session is over.
   */
  constructor(
    private readonly client: ParticipantClient,
    private readonly only: string | undefined,
    private readonly log: Logger | undefined,
    private readonly tell: () => Promise<void> | undefined,
    private readonly ended: () => boolean,
  ) {}

  /** The catalogue last fetched, if any. */
  get current(): Catalogue | undefined {
    return this.catalogue;
  }

  /** Fetches the tools; a slower, older answer never overwrites a newer one. */
  async refresh(): Promise<Catalogue> {
    const seq = ++this.fetchSeq;
    const infos = await this.client.listTools();
    if (seq > this.appliedSeq) {
      const next = buildCatalogue(infos, this.client.id, this.only);
      if (next.fingerprint !== this.catalogue?.fingerprint) {
        for (const s of next.skipped) this.log?.warn({ tool: s.name }, `not offered over MCP: ${s.why}`);
      }
      this.appliedSeq = seq;
      for (const [name, entry] of this.catalogue?.byName ?? []) if (!next.byName.has(name)) this.former.set(name, entry);
      for (const name of next.byName.keys()) this.former.delete(name);
      for (const name of this.former.keys()) {
        if (this.former.size <= MAX_FORMER_TOOLS) break;
        this.former.delete(name);
      }
      this.catalogue = next;
    }
    return this.catalogue!;
  }

  /** The space said its catalogue changed: refresh, and tell the MCP client if what it sees changed. Coalesces bursts. */
  async changed(): Promise<void> {
    if (this.refreshing) {
      this.refreshAgain = true;
      return;
    }
    this.refreshing = true;
    try {
      do {
        this.refreshAgain = false;
        const before = this.catalogue?.fingerprint;
        let after: string;
        try {
          after = (await this.refresh()).fingerprint;
        } catch (err) {
          this.log?.warn({ err: (err as Error).message }, "could not refresh the space's tools");
          return;
        }
        const told = before !== after ? this.tell() : undefined;
        if (told) await told.catch((err: Error) => this.log?.debug({ err: err.message }, "could not send tools/list_changed"));
      } while (this.refreshAgain && !this.ended());
    } finally {
      this.refreshing = false;
    }
  }

  /** The tool a call names: in the list, in a fresh one, or one that left it since. */
  async find(name: string): Promise<CatalogueEntry | undefined> {
    const entry = this.catalogue?.byName.get(name);
    if (entry) return entry;
    // The client may know a tool from a list we have not fetched (or one that just appeared).
    // Calls arriving together share one fetch: a burst of calls is not a burst of tools/list.
    this.lookup ??= this.refresh().finally(() => (this.lookup = undefined));
    await this.lookup.catch(() => undefined);
    return this.catalogue?.byName.get(name) ?? this.former.get(name);
  }
}
