// A copy backend of the host's own (RuntimeOptions.transferBackendModule): the
// store worker loads the module and copies through it; a module that cannot
// be one is refused with a typed error before any worker runs.
import { BroadcastChannel } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, WorkerFailedError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { CHANNEL } from '../fixtures/counting-backend.js';

const fixture = (name: string) => new URL(`../fixtures/${name}`, import.meta.url);
const CONFIG = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  tokensPerHash: 4,
  blocksPerChunk: 2,
  maxRequests: 4,
  maxBlocksPerRequest: 64,
  gpuBlocks: 512,
  tierChunks: 256,
  bytesPerBlock: 64,
};

describe('transferBackendModule', () => {
  it('copies every stored chunk through the module, with verified bytes', async () => {
    const channel = new BroadcastChannel(CHANNEL);
    let bytes = 0;
    channel.onmessage = (e) => (bytes += (e as { data: number }).data);
    try {
      const rt = await OffloadRuntime.start({
        config: CONFIG,
        transferBackendModule: fixture('counting-backend.ts'),
        simulator: { abortQueuedRate: 0, abortRunningRate: 0 },
      });
      const summary = await rt.submit({ promptLength: 100, maxDecodeTokens: 4 });
      const report = await rt.verify();
      await rt.close();
      expect(summary.status).toBe('finished');
      expect(summary.chunksStored).toBeGreaterThan(0);
      expect(report.ok).toBe(true);
      // The last broadcasts cross threads: wait for them (bounded), not a fixed 50 ms.
      const copied = rt.stats().bytesCopied;
      for (let i = 0; i < 2000 && bytes < copied; i += 1) {
        await new Promise((r) => setTimeout(r, 5));
      }
      expect(bytes).toBe(copied);
      expect(bytes).toBeGreaterThan(0);
    } finally {
      channel.close();
    }
  });

  it('regression: a module wrapping the default pool gets its options, completion bell included', async () => {
    const rt = await OffloadRuntime.start({
      config: CONFIG,
      transferBackendModule: fixture('wrapping-backend.ts'),
    });
    try {
      const summary = await rt.submit({ promptLength: 100, maxDecodeTokens: 4 });
      const report = await rt.verify();
      expect(summary.chunksStored).toBeGreaterThan(0);
      expect(report.entriesChecked).toBe(rt.stats().chunksStored);
      expect(report.ok).toBe(true);
    } finally {
      await rt.close();
    }
  });

  it('refuses a module without createTransferBackend before starting workers', async () => {
    await expect(
      OffloadRuntime.start({
        config: CONFIG,
        transferBackendModule: fixture('../helpers/local.ts'),
      }),
    ).rejects.toThrow(/must export a function createTransferBackend/);
  });

  it('refuses a module that cannot be imported, and a relative path', async () => {
    await expect(
      OffloadRuntime.start({ config: CONFIG, transferBackendModule: fixture('missing.ts') }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(
      OffloadRuntime.start({ config: CONFIG, transferBackendModule: './backend.mjs' }),
    ).rejects.toThrow(/relative path/);
  });

  it('fails the start, naming the store, when the factory returns no backend', async () => {
    const started = OffloadRuntime.start({
      config: CONFIG,
      transferBackendModule: fixture('shapeless-backend.ts'),
    });
    await expect(started).rejects.toBeInstanceOf(WorkerFailedError);
    await expect(started).rejects.toThrow(/createTransferBackend must return/);
  });
});
