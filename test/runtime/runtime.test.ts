// Real-thread runs of OffloadRuntime: the default simulation (16 requests of
// ~50k tokens against a 611,840-token pool) and a pressure run with aborts,
// preemption, a tight tier and EAGLE decode. Each run ends with the byte check
// of every tier entry, no holes, no double stores, and nothing left after close.
import { describe, expect, it } from 'vitest';
import { ClosedError, QueueFullError } from '../../src/errors.js';
import { defaultWorkload } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { STRESS, checkAndClose, pressureWorkload } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('OffloadRuntime: the default simulation', () => {
  it('runs 16 long requests to the end with preemption and tier hits, and the main thread keeps ticking', async () => {
    const rt = await OffloadRuntime.start();
    let ticks = 0;
    const ticker = setInterval(() => (ticks += 1), 5);
    let jobs = 0;
    rt.on('job', (e) => {
      jobs += 1;
      expect(e.chunks).toBeGreaterThan(0);
    });
    let ticksWhenFirstEnded = -1;
    const summaries = await Promise.all(
      defaultWorkload().map((r) =>
        rt.submit(r).then((s) => {
          if (ticksWhenFirstEnded < 0) ticksWhenFirstEnded = ticks;
          return s;
        }),
      ),
    );
    const ticksAtEnd = ticks;
    clearInterval(ticker);
    // The event loop turned while the run was in progress, not only after it.
    expect(ticksAtEnd).toBeGreaterThan(ticksWhenFirstEnded);
    expect(ticksWhenFirstEnded).toBeGreaterThan(0);
    expect(summaries).toHaveLength(16);
    const s = rt.stats();
    expect(s.requests).toBe(16);
    expect(s.completed + s.aborted).toBe(16);
    expect(s.preemptions).toBeGreaterThan(0);
    expect(s.tierHits).toBeGreaterThan(0);
    expect(summaries.some((x) => x.hitChunks > 0)).toBe(true);
    expect(s.chunksStored).toBeGreaterThan(0);
    expect(s.chunksDeferred).toBeGreaterThan(0);
    expect(s.bytesCopied).toBeGreaterThan(0);
    expect(jobs).toBeGreaterThan(0);
    await checkAndClose(rt, summaries);
  });
});

describe('OffloadRuntime: pressure', () => {
  const rounds = STRESS ? 6 : 1;
  for (let round = 0; round < rounds; round += 1) {
    it(`aborts, preemption, a tight tier and EAGLE decode keep every invariant (seed ${round + 1})`, async () => {
      const rt = await OffloadRuntime.start({
        config: SMALL_HYBRID,
        transferThreads: 2,
        lag: { hasherHashesPerWake: 8, allocatorPublishDelayMs: 2, jitterMs: 2, seed: round + 1 },
        simulator: {
          stepTokenBudget: 512,
          maxRunning: 12,
          abortQueuedRate: 0.02,
          abortRunningRate: 0.02,
          stepMs: 0, // the engine races ahead of the lagging roles: the harsher case
          seed: round + 1,
        },
      });
      const summaries = await Promise.all(
        pressureWorkload(STRESS ? 120 : 48, round + 1).map((r) => rt.submit(r)),
      );
      const s = rt.stats();
      expect(summaries.every((x) => x.status === 'finished' || x.status === 'aborted')).toBe(true);
      expect(s.aborted).toBeGreaterThan(0);
      expect(s.completed).toBeGreaterThan(0);
      expect(s.preemptions).toBeGreaterThan(0);
      expect(s.tierUsed).toBeLessThanOrEqual(s.tierCapacity);
      await checkAndClose(rt, summaries);
      // A second close is harmless and the runtime refuses new work.
      await rt.close();
      await expect(rt.submit({ promptLength: 64 })).rejects.toBeInstanceOf(ClosedError);
    });
  }
});

describe('OffloadRuntime: closing', () => {
  it('close() while requests run aborts them, drains copies, and a concurrent second close() is the same wait', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID, pendingSubmitsMax: 20 });
    const pending = pressureWorkload(20, 9).map((r) => rt.submit(r));
    // The submit queue is bounded: one more is refused, not queued.
    await expect(rt.submit({ promptLength: 64 })).rejects.toBeInstanceOf(QueueFullError);
    await new Promise((r) => setTimeout(r, 20));
    const [a, b] = [rt.close(), rt.close()];
    expect(a).toBe(b);
    await a;
    const summaries = await Promise.all(pending);
    expect(summaries.some((s) => s.status === 'aborted')).toBe(true);
    expect(rt.leakReport()?.pinsOutstanding).toBe(0);
    expect(rt.leakReport()?.blocksInUse).toBe(0);
    expect(rt.leakReport()?.slotsInUse).toBe(0);
  });
});
