// Regression: under load the store worker's memory grew without bound (about
// a gigabyte a minute) while main's heap, verify() and leakReport() all looked
// clean. The threaded store loop completed its jobs around the planner, so
// every job it ever dispatched stayed in the planner's map. Now every driver
// completes jobs through StorePlanner.complete(), the planner's held jobs are
// in stats() (jobsHeld) and the leak report, and the soak (npm run soak)
// watches every worker's own heap. This is the soak's short version: with the
// fix reverted the planner holds every job ever dispatched, far past the
// bound on jobs in flight, and the leak report is not clean.
import { describe, expect, it } from 'vitest';
import { runSoak } from '../../bench/lib/soak.js';
import { NO_LEAKS } from '../helpers/runtime.js';

describe('the store worker under load (short soak)', () => {
  it('holds no more jobs than can be in flight, leaks nothing, and every worker reports its own memory', async () => {
    const report = await runSoak({ seconds: 12, warmupSeconds: 4, seed: 3 });
    expect(report.lifecycles).toBeGreaterThan(500);
    // Slots were reused many times over, with aborts and tier eviction.
    expect(report.aborted).toBeGreaterThan(0);
    expect(report.tierEvictions).toBeGreaterThan(0);
    expect(report.jobsHeldMax).toBeGreaterThan(0);
    expect(report.jobsHeldMax).toBeLessThanOrEqual(256);
    expect(report.leaks).toEqual(NO_LEAKS);
    expect(report.verifyOk).toBe(true);
    // Sampled by each worker itself: every role and the copy thread has a figure.
    const last = report.points.at(-1)!.memory;
    for (const role of ['scheduler', 'hasher', 'allocator', 'store'] as const) {
      expect(last[role]?.heapUsedBytes).toBeGreaterThan(1 << 20);
    }
    expect(last.transfer.length).toBe(1);
    expect(report.workers.map((w) => w.worker)).toContain('store');
  });
});
