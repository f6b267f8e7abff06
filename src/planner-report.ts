// What a planning visit tells its observer and counts, for the chunks the
// cursor passes: deferred (token-ready, not ready), skipped by a legacy
// policy, null or unreachable, and, at an ended request's final pass, dropped
// because they never became ready. The observer's feed is what the chunk
// ledger (src/ledger.ts) keeps; the counts are the planner's counters.
import type { ChunkOutcome, PlannerCounters, PlannerObserver } from './planner-options.js';
import type { StoreWindow } from './ready.js';
import type { RequestSnapshot } from './roles/store.js';

/** The chunks of an offer the cursor passes without a copy. */
export interface PassedOver {
  readonly unreachable: number;
  /** (group, chunk) pairs, only for an observer. */
  readonly nullChunks: number[] | undefined;
  readonly unreachableChunks: number[] | undefined;
}

export class PassReport {
  /** Per group: first chunk deferred at this pass (the rest up to tokenChunks). */
  readonly deferredFrom: Int32Array;
  /** Per group: first chunk that waits at this pass (deferredFrom, or past it where the cursor skipped). */
  readonly waitingFrom: Int32Array;
  private readonly observer: PlannerObserver | undefined;
  private readonly counters: PlannerCounters;
  private readonly snap: Readonly<RequestSnapshot>;
  private readonly windows: readonly StoreWindow[];
  private readonly skipSettle: boolean;
  private readonly groups: number;

  constructor(
    observer: PlannerObserver | undefined,
    counters: PlannerCounters,
    snap: Readonly<RequestSnapshot>,
    windows: readonly StoreWindow[],
    skipSettle: boolean,
  ) {
    this.observer = observer;
    this.counters = counters;
    this.snap = snap;
    this.windows = windows;
    this.skipSettle = skipSettle;
    this.groups = windows.length;
    this.deferredFrom = new Int32Array(this.groups);
    this.waitingFrom = new Int32Array(this.groups);
  }

  /** True when an observer wants each chunk's outcome (else the lists are not built). */
  get chunks(): boolean {
    return this.observer?.chunk !== undefined;
  }

  report(group: number, chunk: number, outcome: ChunkOutcome): void {
    this.observer?.chunk?.(this.snap.slot, this.snap.generation, group, chunk, outcome);
  }

  /** Counts the chunks that wait for a later pass (from waitingFrom; skipped ones are not deferred). */
  countDeferred(deferred: number): void {
    this.counters.chunksDeferred += deferred;
    const observer = this.observer;
    if (deferred === 0 || observer?.deferred === undefined) return;
    for (let g = 0; g < this.groups; g += 1) {
      const from = this.waitingFrom[g]!;
      const to = this.windows[g]!.tokenChunks;
      if (to > from) observer.deferred(this.snap.slot, this.snap.generation, g, from, to);
    }
  }

  /** Counts (and reports) the chunks a legacy policy's cursor passes unready: [deferredFrom, waitingFrom). */
  countSkipped(skipped: number): void {
    this.counters.chunksSkippedUnready += skipped;
    if (skipped === 0 || this.observer?.chunk === undefined) return;
    for (let g = 0; g < this.groups; g += 1) {
      for (let c = this.deferredFrom[g]!; c < this.waitingFrom[g]!; c += 1)
        this.report(g, c, 'skipped');
    }
  }

  /**
   * Reports the offer's null chunks, and counts (and reports) its unreachable
   * ones: only on the paths where the cursor moves over them.
   */
  passOver(offer: PassedOver): void {
    this.reportNulls(offer.nullChunks);
    this.counters.chunksUnreachable += offer.unreachable;
    this.reportNulls(offer.unreachableChunks, 'unreachable');
  }

  private reportNulls(nullChunks: number[] | undefined, outcome: ChunkOutcome = 'null'): void {
    if (nullChunks === undefined) return;
    for (let i = 0; i < nullChunks.length; i += 2)
      this.report(nullChunks[i]!, nullChunks[i + 1]!, outcome);
  }

  /**
   * At the final pass: counts (and reports) the token-ready chunks that were
   * not ready, they never will be. Not in the unsafe variant without the
   * protocol, whose loss stays silent so the fuzzer can find it.
   */
  dropUnready(deferred: number): void {
    if (deferred === 0 || this.skipSettle) return;
    this.counters.chunksDroppedUnready += deferred;
    if (this.observer?.chunk === undefined) return;
    for (let g = 0; g < this.groups; g += 1) {
      const to = this.windows[g]!.tokenChunks;
      for (let c = this.deferredFrom[g]!; c < to; c += 1) this.report(g, c, 'unready');
    }
  }
}
