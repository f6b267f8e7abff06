// The store jobs a planner handed out and has not seen completed, and the one
// way a job ends (StorePlanner.complete): the record dropped, a failed copy's
// chunks counted, the tier entries published (or discarded), the source pins
// released unless the copy released them itself. With tensor-parallel ranks a
// job ends only when every rank has acknowledged its copy (acknowledge), or
// when the acknowledgement bound passes without them (expire).
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
  /** Tensor-parallel ranks whose acknowledgements end a job (Config.ranks). */
  readonly ranks: number;
  /** How long (ms on `now`) a job waits for its last rank's acknowledgement before it fails as a whole. */
  readonly rankAckWaitMsMax: number;
  readonly now: () => number;
  /** Test-only: PlannerOptions.unsafePublishOnFirstAck. */
  readonly publishOnFirstAck: boolean;
}

/** What acknowledge() did: the job waits for more ranks, ended, or the acknowledgement came too late. */
export type AckOutcome =
  | { readonly state: 'waiting' }
  | { readonly state: 'completed'; readonly ok: boolean }
  | { readonly state: 'late' };

const WAITING: AckOutcome = Object.freeze({ state: 'waiting' });
const LATE: AckOutcome = Object.freeze({ state: 'late' });
const COMPLETED_OK: AckOutcome = Object.freeze({ state: 'completed', ok: true });
const COMPLETED_FAILED: AckOutcome = Object.freeze({ state: 'completed', ok: false });

/** One job's acknowledgements so far (ranks > 1 only). */
interface Acks {
  /** 1 for each rank that acknowledged. */
  readonly acked: Uint8Array;
  count: number;
  failed: boolean;
  /** When (on `now`) the job was issued: the bound counts from there. */
  readonly sinceMs: number;
}

/** A job the bound failed: its slots stay retired until every missing rank has reported. */
interface Expired {
  readonly acked: Uint8Array;
  count: number;
  readonly slots: readonly number[];
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
  /** Per job in flight, its ranks' acknowledgements (empty with one rank). */
  private readonly acks = new Map<number, Acks>();
  /** Jobs the acknowledgement bound failed, until their missing ranks report (or forever). */
  private readonly expired = new Map<number, Expired>();

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
    const { ranks } = this.options;
    if (ranks > 1) {
      this.acks.set(job.jobId, {
        acked: new Uint8Array(ranks),
        count: 0,
        failed: false,
        sinceMs: this.options.now(),
      });
    }
    return job;
  }

  /**
   * Rank `rank` reports its copy of job `jobId` (vLLM's worker meta
   * completed_jobs, summed by the scheduler): the job ends, through
   * complete(), only when every rank has reported, failed as a whole if any
   * rank's copy failed. A rank that does not write (an empty shard) reports
   * like the others. A report for a job the bound already failed is late: it
   * counts toward giving the job's retired slots back. Throws
   * InvalidArgumentError, changing nothing, for an unknown job or rank, or a
   * rank reporting twice.
   */
  acknowledge(jobId: number, rank: number, ok: boolean): AckOutcome {
    const { ranks } = this.options;
    if (!Number.isInteger(rank) || rank < 0 || rank >= ranks) {
      throw new InvalidArgumentError('rank', `must be an integer in [0, ${ranks})`);
    }
    if (typeof ok !== 'boolean') throw new InvalidArgumentError('ok', 'must be a boolean');
    const job = this.issued.get(jobId);
    if (job === undefined) return this.lateAck(jobId, rank);
    if (ranks === 1) {
      this.complete(job, ok);
      return ok ? COMPLETED_OK : COMPLETED_FAILED;
    }
    const a = this.acks.get(jobId)!;
    if (a.acked[rank] === 1) {
      throw new InvalidArgumentError('rank', `rank ${rank} already acknowledged job ${jobId}`);
    }
    a.acked[rank] = 1;
    a.count += 1;
    if (!ok) a.failed = true;
    // The broken variant: the first rank's word is taken for everyone's.
    if (this.options.publishOnFirstAck && a.count === 1 && ok) {
      this.acks.delete(jobId);
      this.expired.set(jobId, { acked: a.acked, count: a.count, slots: [] });
      this.complete(job, true);
      return COMPLETED_OK;
    }
    if (a.count < ranks) return WAITING;
    this.complete(job, !a.failed);
    return a.failed ? COMPLETED_FAILED : COMPLETED_OK;
  }

  private lateAck(jobId: number, rank: number): AckOutcome {
    const e = this.expired.get(jobId);
    if (e === undefined || e.acked[rank] === 1) {
      throw new InvalidArgumentError(
        'jobId',
        `job ${jobId} was not issued by this planner, or rank ${rank} already acknowledged it`,
      );
    }
    e.acked[rank] = 1;
    e.count += 1;
    this.counters.rankAcksLate += 1;
    if (e.count === this.options.ranks) {
      this.expired.delete(jobId);
      // Nothing copies into them any more: the slots a missing rank might have written go back.
      if (e.slots.length > 0) this.tier.releaseRetired!(e.slots);
    }
    return LATE;
  }

  /**
   * Jobs whose ranks have not all acknowledged within rankAckWaitMsMax of
   * their dispatch fail as a whole: their chunks are counted
   * (chunksTransferFailed, rankAckTimeouts), the observer hears of the
   * failure, every source pin is released, and the tier slots they reserved
   * leave the index but stay retired until the missing ranks report, since
   * a rank that is only late may still write into them. Returns the jobs it
   * failed (oldest first); with one rank, or nothing overdue, none.
   */
  expire(): StoreJob[] {
    if (this.acks.size === 0) return NO_JOBS;
    const now = this.options.now();
    const waitMsMax = this.options.rankAckWaitMsMax;
    let out: StoreJob[] | undefined;
    for (const [jobId, a] of this.acks) {
      // Issued in id order with a clock that does not go back: the first young job ends the scan.
      if (now - a.sinceMs < waitMsMax) break;
      const job = this.issued.get(jobId)!;
      (out ??= []).push(job);
      this.expireJob(job, a);
    }
    return out ?? NO_JOBS;
  }

  private expireJob(job: StoreJob, a: Acks): void {
    this.acks.delete(job.jobId);
    this.issued.delete(job.jobId);
    const stale = this.isStale(job);
    this.counters.rankAckTimeouts += 1;
    this.counters.chunksTransferFailed += job.chunks.length;
    let slots: number[];
    if (stale) {
      // A reset already retired them (one holder each): the late ranks give them back.
      slots = job.chunks.map((c) => c.tierSlot);
      this.counters.chunksDiscardedByReset += job.chunks.length;
    } else {
      this.options.onFailed(job);
      slots = this.tier.abandonStore!(job.chunks.map((c) => c.key));
    }
    this.expired.set(job.jobId, { acked: a.acked, count: a.count, slots });
    if (this.options.pinned) for (const c of job.chunks) unpinBlocks(this.pins, c.blocks);
  }

  /** Jobs the bound failed whose missing ranks have not reported (their slots stay retired). */
  get expiredHeld(): number {
    return this.expired.size;
  }

  /** Tier slots those jobs keep retired. */
  get expiredSlots(): number {
    let n = 0;
    for (const e of this.expired.values()) n += e.slots.length;
    return n;
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
    this.acks.delete(job.jobId);
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

const NO_JOBS: StoreJob[] = Object.freeze([]) as unknown as StoreJob[];
