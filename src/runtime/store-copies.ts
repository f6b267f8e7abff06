// The store role's copies: each planned store job sent to the transfer backend
// (a copy per rank, each of its own shard), and each completion carried out:
// the planner ends the job through its one completion path, then the job's
// entries move from being written to readable (and write through to the
// levels below host); a failed copy fails its job only, until
// transferFailuresMax fail in a row. StoreLoop (store-loop.ts) owns the maps
// and calls it each step.
import { InvalidArgumentError, TransferBackendFailedError, invariant } from '../errors.js';
import type { EventCapture } from '../events/capture.js';
import type { StoreJob } from '../job.js';
import type { TransferCompletion } from './backend.js';
import type { StoreParts } from './store-loads.js';
import type { JobEvent } from './store-messages.js';
import { TRANSFER_FAILURES_MAX } from './store-options.js';
import type { StoreLoopOptions } from './store-options.js';
import { TASK_FAULT, encodeStoreTask } from './transfer.js';

export interface StoreCopiesDeps extends StoreParts {
  readonly capture: EventCapture | undefined;
  /** True while a load of this request is in flight. */
  loading(requestId: number): boolean;
  /** The store loop's reset count. */
  resets(): number;
  /** The host tier's events, taken now (store-loop.ts). */
  takeTierEvents(): void;
}

export class StoreCopies {
  /** Store copies dispatched so far (one per job, whatever the ranks). */
  tasks = 0;
  bytesCopied = 0;
  jobsCompleted = 0;
  jobsTransferFailed = 0;
  hostStoreUs = 0;
  /** Jobs completed since the last takeJobEvents(). */
  jobEvents: JobEvent[] = [];
  private readonly skipPins: boolean;
  private readonly delayMs: number;
  private readonly faultAfterTasks: number;
  private readonly faultTasks: number;
  private readonly transferFailuresMax: number;
  /** Failed store copies since the last one that succeeded. */
  private transferFailuresInRow = 0;
  /** Per job waiting for other ranks: the error of a rank whose copy failed. */
  private readonly rankErrors = new Map<number, unknown>();
  /** Per job waiting for other ranks: the bytes its ranks copied so far (the job event's figure). */
  private readonly rankBytes = new Map<number, number>();

  constructor(
    private readonly deps: StoreCopiesDeps,
    options: StoreLoopOptions,
  ) {
    this.skipPins = options.unsafeSkipPins ?? false;
    this.delayMs = options.transferDelayMs ?? 0;
    this.faultAfterTasks = options.faultAfterTasks ?? Infinity;
    this.faultTasks = options.faultTasks ?? Infinity;
    this.transferFailuresMax = options.transferFailuresMax ?? TRANSFER_FAILURES_MAX;
    if (!Number.isInteger(this.transferFailuresMax) || this.transferFailuresMax < 1) {
      throw new InvalidArgumentError('transferFailuresMax', 'must be a positive integer');
    }
  }

  dispatch(job: StoreJob): void {
    // One load xor stores per request (vLLM's §7.6): a loading request has computed nothing to store.
    if (this.deps.loading(job.requestId))
      invariant(false, `request ${job.requestId} stores while it loads`);
    const bpc = this.deps.views.config.blocksPerChunk;
    this.tasks += 1;
    for (const c of job.chunks) {
      // Deleted first so the map stays in dispatch order: its first entry is the oldest copy.
      this.deps.writing.delete(c.key);
      this.deps.writing.set(c.key, {
        slot: c.tierSlot,
        positions: c.positions.map((p) => p % bpc),
        group: c.group,
        task: this.tasks,
      });
    }
    this.deps.capture?.dispatched(job);
    const fault =
      this.tasks >= this.faultAfterTasks && this.tasks < this.faultAfterTasks + this.faultTasks;
    const { ranks, rankLayout } = this.deps.views.config;
    if (ranks === 1) {
      const task = encodeStoreTask(job, !this.skipPins, this.delayMs);
      if (fault) task[0] = TASK_FAULT;
      this.deps.backend.submit(task);
      return;
    }
    // One copy per rank, each of its own shard; the planner releases the pins
    // at the last acknowledgement (a rank's copy reads them until it reports).
    const replicated = rankLayout === 'replicated';
    for (let rank = 0; rank < ranks; rank += 1) {
      const task = encodeStoreTask(job, false, this.delayMs, { rank, ranks, replicated });
      // The injected fault fails the last rank's copy: its job fails as a whole.
      if (fault && rank === ranks - 1) task[0] = TASK_FAULT;
      this.deps.backend.submit(task);
    }
  }

  /**
   * A store copy finished: the planner ends the job (its one completion path)
   * and then the entries become readable. A failed copy fails its job only:
   * its chunks are counted (chunksTransferFailed), its tier reservations
   * discarded, its pins were released by the copy, and later jobs go on, as
   * vLLM treats a failed transfer. Only transferFailuresMax failures in a row
   * stop the store.
   */
  complete(c: TransferCompletion): void {
    const job = this.deps.planner.issuedJob(c.jobId);
    const ranks = this.deps.views.config.ranks;
    if (job === undefined && ranks === 1) invariant(false, `store job ${c.jobId} was in flight`);
    // In flight at a reset: the planner publishes nothing and gives its retired slots back.
    const stale = job !== undefined && this.deps.planner.isStale(job);
    this.bytesCopied += c.bytes;
    const outcome = this.deps.planner.acknowledge(c.jobId, c.rank ?? 0, c.ok);
    // Other ranks still copying, or a job the bound already failed: nothing to publish.
    if (outcome.state !== 'completed') {
      if (outcome.state === 'waiting') {
        if (!c.ok) this.rankErrors.set(c.jobId, c.error);
        this.rankBytes.set(c.jobId, (this.rankBytes.get(c.jobId) ?? 0) + c.bytes);
      }
      return;
    }
    if (job === undefined) invariant(false, `store job ${c.jobId} was in flight`);
    const error = c.ok ? this.rankErrors.get(c.jobId) : c.error;
    const bytes = (this.rankBytes.get(c.jobId) ?? 0) + c.bytes;
    this.rankErrors.delete(c.jobId);
    this.rankBytes.delete(c.jobId);
    if (!outcome.ok) {
      this.deps.capture?.settled(job);
      this.storeFailed(job, error, stale);
      return;
    }
    this.transferFailuresInRow = 0;
    if (stale) {
      this.jobsCompleted += 1;
      return;
    }
    const bpc = this.deps.views.config.blocksPerChunk;
    for (const chunk of job.chunks) {
      const k = chunk.key;
      const w = this.deps.writing.get(k);
      if (w === undefined) continue;
      this.deps.writing.delete(k);
      this.deps.readable.set(k, {
        slot: w.slot,
        positions: w.positions,
        group: w.group,
        resets: this.deps.resets(),
      });
      // Write-through from the published host copy (whole chunks only): GPU blocks are already unpinned.
      if (this.deps.lower && w.positions.length === bpc) this.deps.lower.writeThrough(k, w.slot);
    }
    // Announced now, while the chunks' captured tokens are at hand.
    if (this.deps.capture) {
      this.deps.takeTierEvents();
      this.deps.capture.settled(job);
    }

    this.hostStoreUs += c.latencyMs * 1000;
    this.jobsCompleted += 1;
    this.jobEvents.push({
      jobId: c.jobId,
      chunks: job.chunks.length,
      bytes,
      latencyMs: c.latencyMs,
    });
  }

  /**
   * A job the acknowledgement bound failed (a rank never reported): like a
   * failed copy, its chunks are dropped and counted and its entries never
   * published, but it is no copy failure: the store goes on.
   */
  rankAcksTimedOut(job: StoreJob): void {
    this.rankErrors.delete(job.jobId);
    this.rankBytes.delete(job.jobId);
    this.deps.capture?.settled(job);
    if (!this.deps.planner.isStale(job))
      for (const chunk of job.chunks) this.deps.writing.delete(chunk.key);
    this.jobsTransferFailed += 1;
  }

  private storeFailed(job: StoreJob, error: unknown, stale: boolean): void {
    // A stale job's keys may name entries of the new epoch: only its failure counts
    // (nor does the chunk ledger hear of it: the planner tells it of fresh jobs only).
    if (!stale) for (const chunk of job.chunks) this.deps.writing.delete(chunk.key);
    this.jobsTransferFailed += 1;
    this.transferFailuresInRow += 1;
    if (this.transferFailuresInRow >= this.transferFailuresMax) {
      throw new TransferBackendFailedError(this.transferFailuresInRow, error);
    }
  }
}
