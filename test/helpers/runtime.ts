// Shared pieces of the real-thread runtime tests: a workload with aborts that
// keeps the pool and the tier tight on SMALL_HYBRID (preemption, eviction,
// capacity drops), and the checks every run must pass.
import { expect } from 'vitest';
import { Prng } from '../../src/prng.js';
import { readStat } from '../../src/runtime/stats.js';
import type {
  LeakReport,
  OffloadRuntime,
  RequestSummary,
  RequestInput,
} from '../../src/runtime/runtime.js';

/** The leak report of a runtime closed with nothing held. */
export const NO_LEAKS: LeakReport = {
  requestsInEngine: 0,
  blocksInUse: 0,
  blocksQuarantined: 0,
  pinsOutstanding: 0,
  slotsInUse: 0,
  tierEntriesWriting: 0,
  tierEntriesReading: 0,
  jobsInFlight: 0,
  loadLocks: 0,
};

/** Longer runs with KVOFF_STRESS=1. */
export const STRESS = process.env.KVOFF_STRESS === '1';

/** `n` requests of 600-1500 prompt tokens over 3 shared prefixes; every 7th aborts itself mid-prefill. */
export function pressureWorkload(n: number, seed = 1): RequestInput[] {
  const random = new Prng(seed);
  return Array.from({ length: n }, (_, i) => {
    const promptLength = 600 + random.int(900);
    const req: RequestInput = {
      promptLength,
      prefixId: i % 3,
      sharedPrefixTokens: Math.floor(promptLength * 0.5),
      maxDecodeTokens: 8 + random.int(24),
    };
    if (i % 7 === 3) req.abortAfterTokens = Math.floor(promptLength / 2);
    return req;
  });
}

/** Waits (bounded, on timers) until no copy is in flight, so verify sees every entry. */
export async function settle(rt: OffloadRuntime, ms = 20_000): Promise<void> {
  // The store publishes jobsInFlight at the end of its step, after it may have
  // posted a request's 'drained' and dispatched its last job: one 0 read can be
  // the step before. Settled is 0 on every poll across two whole store passes,
  // counted by the store's pass word (published after jobsInFlight), not timed:
  // a fixed 50 ms quiet time was less than one pass at load 40 on 2 cores.
  const deadline = Date.now() + ms;
  let quietFromPass = -1;
  while (Date.now() < deadline && rt.failedWith === undefined) {
    const passes = readStat(rt['views'].stats, 'storePasses');
    if (rt.stats().jobsInFlight > 0) quietFromPass = -1;
    else if (quietFromPass < 0) quietFromPass = passes;
    else if (passes >= quietFromPass + 2) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Verify, close, and check that nothing is left: the invariants of every run. */
export async function checkAndClose(
  rt: OffloadRuntime,
  summaries: RequestSummary[],
): Promise<void> {
  await settle(rt);
  const report = await rt.verify();
  expect(report.mismatches).toBe(0);
  expect(report.holes).toBe(0);
  expect(report.doubleStores).toBe(0);
  expect(report.ok).toBe(true);
  expect(report.entriesChecked).toBeGreaterThan(0);
  for (const s of summaries) expect(s.holes).toBe(0);
  expect(rt.stats().mismatches).toBe(0);
  await rt.close();
  expect(rt.leakReport()).toEqual(NO_LEAKS);
}
