// Tensor-parallel ranks on real threads (Config.ranks, issue 28 point 6): each
// store job becomes one copy per rank on the transfer threads, each of its
// rank's shard; the store publishes an entry only once every rank reported,
// and a load restores every rank's shard (the engine checks every loaded
// block's bytes against its key, so a shard left out would be a mismatch).
import { describe, expect, it } from 'vitest';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { SMALL_HYBRID } from '../helpers/configs.js';
import { NO_LEAKS, checkAndClose, pressureWorkload, settle } from '../helpers/runtime.js';

describe('OffloadRuntime with ranks', () => {
  it.each([
    ['sharded', 2],
    ['sharded', 4],
    ['replicated', 2],
  ] as const)(
    '%s over %i ranks: every entry whole, tier hits loaded and verified, nothing leaks',
    async (rankLayout, ranks) => {
      const rt = await OffloadRuntime.start({
        config: { ...SMALL_HYBRID, ranks, rankLayout },
        transferThreads: 2,
        lag: { hasherHashesPerWake: 8, allocatorPublishDelayMs: 1, jitterMs: 1, seed: ranks },
      });
      // The first request of each of the 3 prefixes ends before the others
      // start, so their lookups find its chunks whatever the machine's load
      // (all 12 at once, every lookup could come before any store: 0 hits
      // at load 13).
      const workload = pressureWorkload(12, ranks);
      const first = await Promise.all(workload.slice(0, 3).map((r) => rt.submit(r)));
      const rest = await Promise.all(workload.slice(3).map((r) => rt.submit(r)));
      const summaries = [...first, ...rest];
      const s = rt.stats();
      expect(s.chunksStored).toBeGreaterThan(0);
      // Shared prefixes: later requests load what earlier ones stored, every rank its shard.
      expect(rest.filter((x) => x.hitChunks > 0).length).toBeGreaterThan(0);
      expect(s.tierHits).toBeGreaterThan(0);
      expect(s.rankAckTimeouts).toBe(0);
      // Every rank's copy is counted: the sum is the bytes of the whole blocks stored.
      await checkAndClose(rt, summaries);
    },
  );

  it("one rank's failed copy fails its job as a whole: chunks counted, nothing half-written published, nothing leaks", async () => {
    const rt = await OffloadRuntime.start({
      config: { ...SMALL_HYBRID, ranks: 2 },
      transferThreads: 2,
      faultInjection: { role: 'transfer', afterSteps: 3, count: 1 },
    });
    const summaries = await Promise.all(pressureWorkload(6, 3).map((r) => rt.submit(r)));
    await settle(rt);
    expect(rt.failedWith).toBeUndefined();
    expect(summaries.every((x) => x.holes === 0)).toBe(true);
    const stats = rt.stats();
    expect(stats.jobsTransferFailed).toBe(1);
    expect(stats.chunksTransferFailed).toBeGreaterThan(0);
    const report = await rt.verify();
    // Rank 0 copied its shard of the failed job: had the entries been published, they would mismatch.
    expect(report.mismatches).toBe(0);
    expect(report.ok).toBe(true);
    await rt.close();
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it('refuses ranks with the WebGPU backend, and a bad rankAckWaitMsMax, before starting', async () => {
    await expect(
      OffloadRuntime.start({ config: { ranks: 2 }, transferBackend: 'webgpu' }),
    ).rejects.toThrow(InvalidArgumentError);
    await expect(
      OffloadRuntime.start({ config: { ranks: 2 }, rankAckWaitMsMax: -1 }),
    ).rejects.toThrow(InvalidArgumentError);
  });
});
