// The end of a request, per slot: how long an ended request has waited for
// its last keys and block IDs without a publication, and how many of its
// final offers the tier refused. The planner asks at each visit of an ended
// request that is not final yet (docs/design.md, "The end of a request").
import { InvalidArgumentError } from './errors.js';

/** Passes an ended request's final offer may fail for lack of tier space before its chunks are dropped. */
export const FINAL_STORE_ATTEMPTS_MAX = 3;

/**
 * The end-of-request protocol, bound of its wait. An ended request whose
 * token-ready chunks are not all ready waits (its blocks are held until it
 * drains) until both sources are settled: the allocator's mark that every
 * block ID of the generation is published (`blocksSettled`), and every key its
 * final tokens yield. Then whatever is still missing can never come and is
 * counted in chunksDroppedUnready. The wait is bounded in time without a
 * publication, not in visits: a store that keeps pace visits a waiting slot on
 * every pass, so a bound in visits was minutes in threads and a fraction of a
 * second in a test. A host that never settles, or a stalled allocator or
 * hasher, holds the blocks at most this long after its last publication;
 * what is missing then is counted the same way. Never silent.
 */
export const FINAL_WAIT_MS_MAX = 1_000;

export class FinalWaits {
  private readonly waitMsMax: number;
  private readonly now: () => number;
  /** Per slot: failed final offers of the generation in attemptGeneration. */
  private readonly attempts: Int32Array;
  private readonly attemptGeneration: Int32Array;
  /** Per slot: when (on `now`) the ended generation in waitGeneration last saw a publication while waiting. */
  private readonly waitSinceMs: Float64Array;
  /** Per slot: keys plus block IDs published at that moment. */
  private readonly waitPublished: Int32Array;
  private readonly waitGeneration: Int32Array;

  /** Throws InvalidArgumentError for a bound that is not a finite number of ms, or a clock that is not a function. */
  constructor(slots: number, waitMsMax: number = FINAL_WAIT_MS_MAX, now?: () => number) {
    if (typeof waitMsMax !== 'number' || !Number.isFinite(waitMsMax) || waitMsMax < 0) {
      throw new InvalidArgumentError('finalWaitMsMax', 'must be a finite number of ms, 0 or more');
    }
    if (now !== undefined && typeof now !== 'function') {
      throw new InvalidArgumentError('now', 'must be a function returning ms');
    }
    this.waitMsMax = waitMsMax;
    this.now = now ?? (() => performance.now());
    this.attempts = new Int32Array(slots);
    this.attemptGeneration = new Int32Array(slots);
    this.waitSinceMs = new Float64Array(slots);
    this.waitPublished = new Int32Array(slots);
    this.waitGeneration = new Int32Array(slots);
  }

  /**
   * An ended request found chunks lagging again, with `published` keys plus
   * block IDs; true once it has waited finalWaitMsMax without a publication.
   * A key or block ID that arrived restarts the wait: a hasher still working
   * through a long prompt is progress, not a stall, while a host that never
   * settles (or a role that died) publishes nothing and is cut off after the
   * bound.
   */
  over(slot: number, generation: number, published: number): boolean {
    const now = this.now();
    if (this.waitGeneration[slot] !== generation || this.waitPublished[slot] !== published) {
      this.waitGeneration[slot] = generation;
      this.waitPublished[slot] = published;
      this.waitSinceMs[slot] = now;
    }
    return now - this.waitSinceMs[slot]! >= this.waitMsMax;
  }

  /** The slot's request starts a new store epoch (a reset): its waits and failed final offers count from 0. */
  restart(slot: number): void {
    this.waitGeneration[slot] = 0;
    this.attemptGeneration[slot] = 0;
  }

  /** The tier refused an ended request's final offer; true once it did FINAL_STORE_ATTEMPTS_MAX times. */
  attemptFailed(slot: number, generation: number): boolean {
    if (this.attemptGeneration[slot] !== generation) {
      this.attemptGeneration[slot] = generation;
      this.attempts[slot] = 0;
    }
    this.attempts[slot]! += 1;
    return this.attempts[slot]! >= FINAL_STORE_ATTEMPTS_MAX;
  }
}
