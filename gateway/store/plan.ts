/**
 * A change of durable state, made in two steps so that nothing moves before it is on
 * disk: the records to write, and what to do in memory once they are written. Made by
 * proposals/book.ts and space.ts, written by ledger.ts.
 */
export interface Plan<R extends { type: string } = { type: string }> {
  records: R[];
  apply(): void;
  /** Runs after the write, whether it succeeded or not (releases what the plan reserved). */
  done?(): void;
  /** Runs when the write failed (gives back what the plan took in advance). */
  undo?(): void;
}
