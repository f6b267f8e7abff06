// OffloadRuntime with offload: false, the scenario benchmark's baseline: no
// store worker and no transfer pool start, yet every request runs to the end
// (the allocator frees blocks without a drained mark) and nothing leaks.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { readStat } from '../../src/runtime/stats.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RuntimeOptions } from '../../src/runtime/runtime.js';
import { NO_LEAKS, pressureWorkload } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('OffloadRuntime { offload: false }', () => {
  it('runs a pressure workload to the end with no store thread, stores nothing, leaks nothing', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID, offload: false });
    const workload = pressureWorkload(24, 7);
    const summaries = await Promise.all(workload.map((r) => rt.submit(r)));
    expect(summaries).toHaveLength(workload.length);
    expect(summaries.some((s) => s.status === 'finished')).toBe(true);
    const s = rt.stats();
    expect(s.completed + s.aborted).toBe(workload.length);
    expect(s.chunksStored).toBe(0);
    expect(s.tierHits).toBe(0);
    expect(s.holes).toBe(0);
    // No store ran a single pass (its counter is written only by the store worker).
    expect(readStat(rt['views'].stats, 'storePasses')).toBe(0);
    await expect(rt.verify()).rejects.toBeInstanceOf(InvalidArgumentError);
    await rt.close();
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it.each<[string, RuntimeOptions]>([
    ['not a boolean', { offload: 'no' as unknown as boolean }],
    ['with external', { offload: false, external: true }],
    ['with tiers', { offload: false, tiers: { disk: { dir: 'unused' } } } as RuntimeOptions],
    ['with simulator.loadFromTier', { offload: false, simulator: { loadFromTier: true } }],
  ])('refuses offload %s with a typed error before any worker starts', async (_, options) => {
    await expect(OffloadRuntime.start(options)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
