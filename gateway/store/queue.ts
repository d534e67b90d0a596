/**
 * The queue behind group commit, shared by the journal (journal.ts) and a cluster's bus
 * store (cluster/bus-store.ts): what is committed within one tick, or while a batch is on
 * its way, goes out together as the next batch, and batches go out in order. Each store
 * says how a batch is written and settles its commits.
 */
export interface Pending<T> {
  txn: T;
  resolve(): void;
  reject(err: Error): void;
}

export class CommitQueue<T> {
  private queue: Pending<T>[] = [];
  private flushing = false;
  private scheduled = false;
  private drained: Array<() => void> = [];

  /** `write` makes one batch durable and resolves or rejects each of its commits. */
  constructor(private readonly write: (batch: Pending<T>[]) => Promise<void>) {}

  /** Queues `txn` for the next batch; resolves once the batch holding it is written. */
  push(txn: T): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ txn, resolve, reject });
      if (!this.flushing && !this.scheduled) {
        this.scheduled = true;
        // Everything committed in this tick joins the batch.
        setImmediate(() => {
          this.scheduled = false;
          void this.flush();
        });
      }
    });
  }

  /** A batch is being written: whoever would change the file under it waits for the batch to end. */
  get writing(): boolean {
    return this.flushing;
  }

  /** Nothing queued, scheduled or being written. */
  get idle(): boolean {
    return !this.flushing && !this.scheduled && this.queue.length === 0;
  }

  /** Resolves once every queued commit has been written (or refused). */
  async drain(): Promise<void> {
    if (this.idle) return;
    await new Promise<void>((resolve) => {
      this.drained.push(resolve);
      if (!this.flushing) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        await this.write(batch);
      }
    } finally {
      this.flushing = false;
      for (const d of this.drained.splice(0)) d();
    }
  }
}
