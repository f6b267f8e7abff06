// Failure paths of the real-thread runtime: a role worker that throws is
// detected and pending work rejects with WorkerFailedError naming the role and
// the cause (nothing hangs); and the pins are what make copies safe: with the
// test-only switch that turns pinning off, a block reused mid-copy is caught
// by the byte check, while the same run with pins stays clean.
import { describe, expect, it } from 'vitest';
import { WorkerFailedError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RuntimeOptions } from '../../src/runtime/runtime.js';
import { pressureWorkload, settle } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('a worker that fails', () => {
  for (const role of ['hasher', 'store', 'allocator', 'scheduler', 'transfer'] as const) {
    it(`${role}: pending submits reject with WorkerFailedError naming the role and the cause; close() settles with it`, async () => {
      const rt = await OffloadRuntime.start({
        config: SMALL_HYBRID,
        // For 'transfer': every store copy from the second fails; two in a row
        // fail the backend. The second and third copies always exist (three
        // prefixes, each stored by its first request), and the requests behind
        // them still wait for their own copies; from the fourth copy, a loaded
        // machine's store batched the run into too few jobs to fail at all.
        faultInjection: { role, afterSteps: role === 'transfer' ? 1 : 3 },
        transferFailuresMax: 2,
      });
      const results = await Promise.allSettled(pressureWorkload(6, 3).map((r) => rt.submit(r)));
      const rejected = results.filter((r) => r.status === 'rejected');
      expect(rejected.length).toBeGreaterThan(0);
      for (const r of rejected) {
        const err = (r as PromiseRejectedResult).reason as WorkerFailedError;
        expect(err).toBeInstanceOf(WorkerFailedError);
        expect(err.code).toBe('KVOFF_WORKER_FAILED');
        expect(err.role).toBe(role);
        expect(err.message).toContain('injected fault');
      }
      await expect(rt.submit({ promptLength: 64 })).rejects.toBeInstanceOf(WorkerFailedError);
      await expect(rt.verify()).rejects.toBeInstanceOf(WorkerFailedError);
      // close() releases everything, then reports why the runtime stopped (each call).
      await expect(rt.close()).rejects.toBe(rt.failedWith);
      await expect(rt.close()).rejects.toBe(rt.failedWith);
    });
  }
});

describe('pins make copies safe', () => {
  // Slow copies and constant block reuse (small window, tight pool): without
  // pins a freed block is handed out and overwritten while its copy sleeps.
  const reuse: RuntimeOptions = {
    config: { ...SMALL_HYBRID, gpuBlocks: 900 },
    transferDelayMs: 15,
    lag: { hasherHashesPerWake: 64, allocatorPublishDelayMs: 0, jitterMs: 0 },
    simulator: {
      stepTokenBudget: 256,
      maxRunning: 10,
      abortQueuedRate: 0,
      abortRunningRate: 0,
      stepMs: 0,
    },
  };

  it('with pinning turned off (test switch) a block reused mid-copy is caught as a byte mismatch', async () => {
    const rt = await OffloadRuntime.start({ ...reuse, unsafeSkipPins: true });
    await Promise.all(pressureWorkload(16, 5).map((r) => rt.submit(r)));
    await settle(rt);
    const report = await rt.verify();
    expect(report.mismatches).toBeGreaterThan(0);
    expect(report.ok).toBe(false);
    expect(rt.stats().mismatches).toBeGreaterThan(0);
    await rt.close();
  });

  it('the same run with pins has no mismatch', async () => {
    const rt = await OffloadRuntime.start(reuse);
    const summaries = await Promise.all(pressureWorkload(16, 5).map((r) => rt.submit(r)));
    await settle(rt);
    const report = await rt.verify();
    expect(report.entriesChecked).toBeGreaterThan(0);
    expect(report.mismatches).toBe(0);
    expect(report.ok).toBe(true);
    expect(summaries.every((s) => s.holes === 0)).toBe(true);
    await rt.close();
    expect(rt.leakReport()?.pinsOutstanding).toBe(0);
    expect(rt.leakReport()?.blocksQuarantined).toBe(0);
  });
});
