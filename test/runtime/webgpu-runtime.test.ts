// A whole runtime on the WebGPU backend (transferBackend 'webgpu') on a real
// device (in CI: Mesa's llvmpipe, installed by scripts/webgpu-driver.sh): the
// simulated engine's KV is computed into GPU buffers by the GPU thread's
// kernel, the store copies it out through staging maps, loads write it back,
// and verify() and the engine's load checks prove that what the tiers hold is
// what the GPU produced. Also: the `webgpu` package is loaded only when asked
// for.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RuntimeOptions } from '../../src/runtime/runtime.js';
import type { RuntimeGpu } from '../../src/runtime/runtime-gpu.js';
import { GPU_LOSE_DEVICE } from '../../src/runtime/webgpu-loop.js';
import { SMALL_HYBRID } from '../helpers/configs.js';
import { runNode } from '../helpers/cli.js';
import { NO_LEAKS, pressureWorkload, settle } from '../helpers/runtime.js';

describe("OffloadRuntime { transferBackend: 'webgpu' }", () => {
  it('stores and loads through the GPU: every tier entry and every loaded block holds the bytes the kernel wrote', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID, transferBackend: 'webgpu' });
    try {
      expect(rt.webgpuAdapter?.name).toMatch(/\S/);
      // No engine of its own: nothing for a host to serve.
      expect(rt.webgpuRings).toBeUndefined();
      const workload = pressureWorkload(16, 3);
      // A first wave, one request per shared prefix (prefixId 0, 1, 2), stores
      // and settles before the rest arrive, so their shared prefixes are in the
      // tier whatever the load: all at once, the GPU thread (llvmpipe, at load
      // 6) had stored nothing before every request was admitted, and no lookup
      // could hit.
      const first = await Promise.all(workload.slice(0, 3).map((r) => rt.submit(r)));
      await settle(rt);
      const rest = await Promise.all(workload.slice(3).map((r) => rt.submit(r)));
      const summaries = [...first, ...rest];
      expect(summaries.every((s) => s.holes === 0)).toBe(true);
      await settle(rt);
      const v = await rt.verify();
      const s = rt.stats();
      expect(s.chunksStored).toBeGreaterThan(0);
      // Shared prefixes come back from the tier: loads through upload buffers, checked on the GPU.
      expect(s.tierHits).toBeGreaterThan(0);
      expect(s.chunksTransferFailed).toBe(0);
      expect(v.entriesChecked).toBeGreaterThan(0);
      expect({ mismatches: s.mismatches, holes: v.holes, doubles: v.doubleStores }).toEqual({
        mismatches: 0,
        holes: 0,
        doubles: 0,
      });
    } finally {
      await rt.close();
    }
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it('a lost device fails the store jobs, not the runtime: chunks counted, every pin released', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      transferBackend: 'webgpu',
      transferFailuresMax: 1 << 20,
    });
    try {
      // The GPU thread's test switch: it destroys its device at its next turn.
      const gpuWords = new Int32Array((rt as unknown as { gpu: RuntimeGpu }).gpu.rings.words);
      Atomics.store(gpuWords, GPU_LOSE_DEVICE, 1);
      const summaries = await Promise.all(pressureWorkload(6, 5).map((r) => rt.submit(r)));
      expect(summaries).toHaveLength(6);
      await settle(rt);
      const s = rt.stats();
      expect(s.chunksTransferFailed).toBeGreaterThan(0);
      expect(s.failure).toBeUndefined();
    } finally {
      await rt.close();
    }
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it.each<[string, RuntimeOptions]>([
    ['an unknown backend', { transferBackend: 'cuda' as 'webgpu' }],
    ['webgpu with a backend module', { transferBackend: 'webgpu', transferBackendModule: 'x' }],
  ])('refuses %s with a typed error before any thread starts', async (_, options) => {
    await expect(OffloadRuntime.start(options)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it.each([
    ['shared-memory', false],
    ['webgpu', true],
  ] as const)("backend %s: Dawn's addon loaded %s", async (backend, loaded) => {
    const run = await runNode(['--import', 'tsx', 'test/fixtures/webgpu-native-load.ts', backend], {
      timeoutMs: 120_000,
    });
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ backend, native: loaded });
  });
});
