// The store jobs a planner handed out and has not seen completed, and the one
// way a job ends (StorePlanner.complete): the record dropped, a failed copy's
// chunks counted, the tier entries published (or discarded), the source pins
// released unless the copy released them itself.
import { InvalidArgumentError, invariant } from './errors.js';
import type { ChunkCopy } from './copy.js';
import type { StoreJob } from './job.js';
import type { PlannerCounters } from './planner-options.js';
import { unpinBlocks } from './pins.js';
import type { OffloadTier } from './tier/types.js';

export interface IssuedJobsOptions {
  /** complete() checks and releases the source pins (false: no pins, or the copy releases them). */
  readonly pinned: boolean;
  /** Test-only (F8): a failed job keeps its pins (PlannerOptions.unsafeSkipUnpinOnFailure). */
  readonly skipUnpinOnFailure: boolean;
  /** A job completed with success = false (the planner's observer hears it), unless it was stale. */
  readonly onFailed: (job: StoreJob) => void;
  /** Test-only: PlannerOptions.unsafePublishStaleJobs (no job-id threshold at a reset). */
  readonly publishStaleJobs: boolean;
}

export class IssuedJobs {
  private readonly pins: Int32Array;
  private readonly tier: OffloadTier;
  private readonly counters: PlannerCounters;
  private readonly options: IssuedJobsOptions;
  private nextJobId = 1;
  /** Jobs with an id below this were in flight at the last reset: they complete without publishing. */
  private staleJobThreshold = 0;
  /**
   * Jobs handed out and not yet completed, by jobId. A Map keyed by the
   * number, not a WeakSet of the job: an object key needs an identity hash
   * (and a WeakSet an ephemeron entry) per job, which was the largest single
   * cost of planning a one-chunk job. complete() is the one way out, for
   * every driver (the threaded store once completed jobs around it, and every
   * job it ever dispatched stayed here: the store worker's heap grew about a
   * gigabyte a minute under load). `jobsHeld` exposes the count so a leak
   * shows in stats() and the leak report.
   */
  private readonly issued = new Map<number, StoreJob>();

  constructor(
    pins: Int32Array,
    tier: OffloadTier,
    counters: PlannerCounters,
    options: IssuedJobsOptions,
  ) {
    this.pins = pins;
    this.tier = tier;
    this.counters = counters;
    this.options = options;
  }

  /** A new job of these chunks, recorded until complete(). */
  issue(slot: number, generation: number, requestId: number, chunks: ChunkCopy[]): StoreJob {
    const job: StoreJob = { jobId: this.nextJobId++, slot, generation, requestId, chunks };
    this.issued.set(job.jobId, job);
    return job;
  }

  get held(): number {
    return this.issued.size;
  }

  get(jobId: number): StoreJob | undefined {
    return this.issued.get(jobId);
  }

  /** Oldest first. */
  values(): IterableIterator<StoreJob> {
    return this.issued.values();
  }

  /** Every job in flight now becomes stale (a reset): it will complete without publishing. */
  markStale(): void {
    this.staleJobThreshold = this.nextJobId;
  }

  /** True for a job that was in flight at the last reset (vLLM's stale job threshold). */
  isStale(job: StoreJob): boolean {
    return job.jobId < this.staleJobThreshold && !this.options.publishStaleJobs;
  }

  /**
   * The tier side of a stale job's end: nothing is published, its retired
   * slots go back to the tier, its chunks are counted. (Its pins are
   * released like any job's.)
   */
  discardStale(job: StoreJob): void {
    const slots = new Array<number>(job.chunks.length);
    for (let i = 0; i < slots.length; i += 1) slots[i] = job.chunks[i]!.tierSlot;
    this.tier.releaseRetired!(slots);
    this.counters.chunksDiscardedByReset += job.chunks.length;
  }

  /** StorePlanner.complete. */
  complete(job: StoreJob, success: boolean): void {
    if (typeof job !== 'object' || job === null || this.issued.get(job.jobId) !== job) {
      throw new InvalidArgumentError(
        'job',
        'was not issued by this planner, or was already completed',
      );
    }
    if (typeof success !== 'boolean')
      throw new InvalidArgumentError('success', 'must be a boolean');
    const { pinned } = this.options;
    if (pinned) {
      for (const c of job.chunks) {
        for (const b of c.blocks) {
          if (!(Atomics.load(this.pins, b) > 0))
            invariant(false, `block ${b} of job ${job.jobId} is pinned`);
        }
      }
    }
    this.issued.delete(job.jobId);
    const stale = this.isStale(job);
    if (!success) {
      this.counters.chunksTransferFailed += job.chunks.length;
      // A stale job's chunks were of a store epoch its request has started over: the observer's account is the new one.
      if (!stale) this.options.onFailed(job);
    }
    if (stale) this.discardStale(job);
    else {
      // A plain loop: Array.prototype.map with a fresh closure was over half of
      // complete()'s time for the one-chunk jobs a store that keeps pace makes.
      const keys = new Array<bigint>(job.chunks.length);
      for (let i = 0; i < keys.length; i += 1) keys[i] = job.chunks[i]!.key;
      this.tier.completeStore(keys, success);
    }
    if (!pinned || (!success && this.options.skipUnpinOnFailure)) return;
    for (const c of job.chunks) unpinBlocks(this.pins, c.blocks);
  }
}
