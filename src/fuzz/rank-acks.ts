// The runtime fuzzer's tensor-parallel ranks (Config.ranks > 1): what stands
// between the copies the transfer steps run and the store that collects their
// completions. Each store copy is one rank's acknowledgement; the scenario
// makes some of them late (held for some virtual ms, so they arrive after
// acknowledgements of later copies) or lost (never delivered: the job's
// bound, rankAckWaitMsMax, then fails it), and the copy threads already run
// the queued copies in any order. With one rank nothing is held or drawn,
// so a one-rank schedule is what it was before ranks existed.
//
// The oracle it keeps: no tier entry of a store job is published before the
// store has been given every rank's acknowledgement of that job. After each
// store step the world asks for the first job whose entry is readable in its
// own slot while an acknowledgement is still missing.
import type { StoreJob } from '../job.js';
import type { TransferBackend, TransferCompletion } from '../runtime/backend.js';
import { TASK_LOAD, taskJobId, taskKind, taskRank } from '../runtime/transfer.js';
import type { OffloadTier } from '../tier/types.js';

/** What happens to one copy's acknowledgement: held for `forMs` virtual ms, or never delivered. */
export type AckFault =
  { readonly kind: 'late'; readonly forMs: number } | { readonly kind: 'lost' };

interface Tracked {
  readonly job: StoreJob;
  delivered: number;
}

export class RankAckRelay implements TransferBackend {
  readonly name: string;
  private readonly inner: TransferBackend;
  private readonly ranks: number;
  private readonly now: () => number;
  /** By submission index (every task counts, stores and loads): what happens to a store copy's acknowledgement. */
  private readonly faults: ReadonlyMap<number, AckFault>;
  private readonly jobOf: (jobId: number) => StoreJob | undefined;
  /** Submission index of each store task in flight, by job id and rank. */
  private readonly taskIndex = new Map<string, number>();
  private submitted = 0;
  /** Late acknowledgements, with the virtual time they are delivered at. */
  private held: { atMs: number; c: TransferCompletion }[] = [];
  /** Acknowledgements never delivered. */
  lost = 0;
  /** Store jobs some of whose acknowledgements the store has not been given yet. */
  private readonly tracked = new Map<number, Tracked>();

  constructor(
    inner: TransferBackend,
    ranks: number,
    faults: ReadonlyMap<number, AckFault>,
    now: () => number,
    jobOf: (jobId: number) => StoreJob | undefined,
  ) {
    this.inner = inner;
    this.name = inner.name;
    this.ranks = ranks;
    this.faults = faults;
    this.now = now;
    this.jobOf = jobOf;
  }

  get inFlight(): number {
    return this.inner.inFlight + this.held.length;
  }

  /** The copies' capacity: a held acknowledgement counts as a copy taken until it is delivered. */
  get capacity(): number {
    return this.inner.capacity ?? Infinity;
  }

  /** Acknowledgements held back and not yet delivered (lost ones excluded). */
  get heldCount(): number {
    return this.held.length;
  }

  /** The earliest virtual time a held acknowledgement is due, or Infinity. */
  get nextDueMs(): number {
    let next = Infinity;
    for (const h of this.held) next = Math.min(next, h.atMs);
    return next;
  }

  submit(task: Int32Array): void {
    const index = this.submitted++;
    if (this.ranks > 1 && taskKind(task) !== TASK_LOAD) {
      const jobId = taskJobId(task);
      this.taskIndex.set(`${jobId}:${taskRank(task)}`, index);
      if (!this.tracked.has(jobId)) {
        // The store submits a job's copies right after the planner issued it.
        const job = this.jobOf(jobId);
        if (job !== undefined) this.tracked.set(jobId, { job, delivered: 0 });
      }
    }
    this.inner.submit(task);
  }

  takeCompletions(): TransferCompletion[] {
    const done = this.inner.takeCompletions();
    if (this.ranks === 1) return done;
    const out: TransferCompletion[] = [];
    const now = this.now();
    // Due late ones first: they were completed before anything completed now.
    if (this.held.length > 0) {
      const still: { atMs: number; c: TransferCompletion }[] = [];
      for (const h of this.held) {
        if (h.atMs <= now) out.push(h.c);
        else still.push(h);
      }
      this.held = still;
    }
    for (const c of done) {
      if (c.kind === 'load') {
        out.push(c);
        continue;
      }
      const key = `${c.jobId}:${c.rank ?? 0}`;
      const fault = this.faults.get(this.taskIndex.get(key) ?? -1);
      this.taskIndex.delete(key);
      if (fault?.kind === 'lost') this.lost += 1;
      else if (fault?.kind === 'late') this.held.push({ atMs: now + fault.forMs, c });
      else out.push(c);
    }
    for (const c of out) {
      if (c.kind !== 'store') continue;
      const t = this.tracked.get(c.jobId);
      if (t !== undefined && (t.delivered += 1) === this.ranks) this.tracked.delete(c.jobId);
    }
    return out;
  }

  /**
   * The first job with an acknowledgement not yet given to the store whose
   * entry is readable in the tier, in the slot that job reserved for it: an
   * entry published before its last acknowledgement. Undefined when none.
   */
  publishedEarly(tier: OffloadTier): { job: StoreJob; key: bigint; delivered: number } | undefined {
    for (const t of this.tracked.values()) {
      for (const c of t.job.chunks) {
        if (tier.state(c.key) === 'hit' && tier.slotOf(c.key) === c.tierSlot) {
          return { job: t.job, key: c.key, delivered: t.delivered };
        }
      }
    }
    return undefined;
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
