// The scheduling policy both engines follow, as pure functions over what they
// read of a request: which waiting request goes next (arrival order), which
// running one is preempted to make room (the newest holding blocks, never an
// older one), whether a new one may be admitted (it fits beside the others, or
// it is alone), and whether one must be ended as too big (alone, with the whole
// pool, it still cannot make one step), how much room admission and resumption
// keep free (the watermark), how a step is fitted to the free blocks, and when
// a request preempts itself. The engine simulator (engine-schedule.ts) and the
// roles fuzz target's engine (src/fuzz/world-schedule.ts) call these; each
// keeps only how it carries a decision out (ring records, or one request's
// action per fuzz decision).
import type { EngineRequest } from './engine-request.js';

/** What the policy reads of a request. */
export type PolicyRequest = Pick<
  EngineRequest,
  'phase' | 'runSeq' | 'admittedSeq' | 'held' | 'awaiting'
>;

/**
 * The next waiting request in arrival order (`requests` in arrival order;
 * `waiting` says which may go now), or undefined: the ones behind it wait.
 */
export function nextInArrivalOrder<R>(
  requests: readonly R[],
  waiting: (r: R) => boolean,
): R | undefined {
  for (const r of requests) if (waiting(r)) return r;
  return undefined;
}

/** Running requests are served oldest first (by when they last started running). */
export function byRunOrder(a: PolicyRequest, b: PolicyRequest): number {
  return a.runSeq - b.runSeq;
}

/** Preempted requests resume oldest first (by admission), before anything new is admitted. */
export function byAdmissionOrder(a: PolicyRequest, b: PolicyRequest): number {
  return a.admittedSeq - b.admittedSeq;
}

/**
 * The request preempted to make room for `r`: the newest running request
 * other than `r`, newer than it, holding blocks (one holding none frees
 * nothing). Never an older one, so the oldest always progresses and the pool
 * cannot livelock. Undefined: nothing newer to take from.
 */
export function preemptionVictim<R extends PolicyRequest>(
  requests: Iterable<R>,
  r: R,
): R | undefined {
  let victim: R | undefined;
  for (const x of requests) {
    if (x === r || x.phase !== 'running' || x.awaiting || x.runSeq < r.runSeq) continue;
    if (x.held === 0) continue;
    if (victim === undefined || x.runSeq > victim.runSeq) victim = x;
  }
  return victim;
}

/**
 * A new request may be admitted when the blocks it needs fit in the free
 * blocks, or when it would be alone (nothing held or reserved): alone it is
 * admitted whatever its size, and its steps are fitted to the pool (or it is
 * ended, mustEndTooBig).
 */
export function mayAdmit(needBlocks: number, freeBlocks: number, alone: boolean): boolean {
  return alone || needBlocks <= freeBlocks;
}

/**
 * A request that cannot schedule one token even though it is alone (nothing
 * else holds or reserves blocks) never will: it is ended, with a reason.
 * With others holding blocks it waits for them instead.
 */
export function mustEndTooBig(tokensThatFit: number, alone: boolean): boolean {
  return tokensThatFit === 0 && alone;
}

/** Share of the pool kept free when a request is admitted or resumed beside others. */
const WATERMARK_FRACTION = 0.02;

/** Blocks kept free beside running requests when another is admitted or resumed. */
export function watermarkBlocks(gpuBlocks: number): number {
  return Math.ceil(gpuBlocks * WATERMARK_FRACTION);
}

/**
 * Free blocks a request being admitted must find: its first prefill chunk's
 * blocks, plus the watermark unless it is alone (then nothing is kept back).
 */
export function admissionBlocks(
  firstChunkBlocks: number,
  watermark: number,
  alone: boolean,
): number {
  return firstChunkBlocks + (alone ? 0 : watermark);
}

/** The blocks a preempted request may resume into: the free ones, less the watermark unless alone. */
export function resumeRoom(freeBlocks: number, watermark: number, alone: boolean): number {
  return freeBlocks - (alone ? 0 : watermark);
}

/**
 * The most tokens, at most `n`, whose new blocks (`blocksFor`, growing with
 * the tokens) fit in `freeBlocks`; 0 if not even one token's do. Steps are
 * fitted to the pool: a prefill takes the chunk that fits.
 */
export function tokensThatFit(
  n: number,
  freeBlocks: number,
  blocksFor: (tokens: number) => number,
): number {
  if (blocksFor(n) <= freeBlocks) return n;
  let lo = 0;
  let hi = n; // blocksFor(lo) fits (or lo is 0), blocksFor(hi) does not
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if (blocksFor(mid) <= freeBlocks) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * A running request still short of blocks once nothing newer is left to
 * preempt preempts itself when older requests were served before it in this
 * step and it holds blocks (like vLLM): the older ones keep the room to grow,
 * and it resumes once there is room again.
 */
export function mustPreemptItself(short: boolean, olderServed: number, held: number): boolean {
  return short && olderServed > 0 && held > 0;
}
