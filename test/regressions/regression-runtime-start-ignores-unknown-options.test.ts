// Regression (issue 31, item 4): `OffloadRuntime.start({ transferThread: 2 })`
// (a typo) started silently with one copy thread, while the HTTP API refuses
// unknown fields; and `start({ config: { groups } })` failed on tokensPerHash,
// a field the defaults would fill, while the fields it did fill took
// resolveConfig's defaults (blocksPerChunk 1), not DEFAULT_RUNTIME_CONFIG's 4.
// Unknown keys are now refused at every level, naming the key, before any
// worker starts; a partial config is merged over DEFAULT_RUNTIME_CONFIG.
import { describe, expect, it } from 'vitest';
import { ConfigError, InvalidArgumentError } from '../../src/errors.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RuntimeOptions } from '../../src/runtime/runtime.js';
import { KvoffServer } from '../../src/serve/server.js';

describe('regression: start() refuses option keys it does not know', () => {
  it.each([
    [
      { transferThread: 2 },
      InvalidArgumentError,
      /"transferThread": is not a known option \(did you mean transferThreads\?\)/,
    ],
    [
      { simulator: { seeed: 3 } },
      InvalidArgumentError,
      /simulator\."seeed": is not a known option/,
    ],
    [{ lag: { jitter: 1 } }, InvalidArgumentError, /lag\."jitter": is not a known option/],
    [
      { tiers: { redis: { urls: ['redis://127.0.0.1:1'], storesQueuedMax: 8 } } },
      InvalidArgumentError,
      /tiers\.redis\."storesQueuedMax": is not a known option/,
    ],
    [
      { tiers: { disk: { dir: '/nonexistent', bytes: 1 } } },
      InvalidArgumentError,
      /tiers\.disk\."bytes"/,
    ],
    [
      { config: { gpuBlock: 64 } },
      ConfigError,
      /config\."gpuBlock": is not a known option \(did you mean gpuBlocks\?\)/,
    ],
    [
      { config: { groups: [{ kind: 'full', tokensPerBlock: 16, window: 8 }] } },
      ConfigError,
      /config\.groups\[0\]\."window": is not a known option/,
    ],
  ])('%j', async (options, type, message) => {
    const started = OffloadRuntime.start(options as RuntimeOptions);
    await expect(started).rejects.toBeInstanceOf(type);
    await expect(started).rejects.toThrow(message);
  });

  it('KvoffServer refuses an unknown option too', () => {
    const runtime = {} as ConstructorParameters<typeof KvoffServer>[0];
    expect(() => new KvoffServer(runtime, { inflightMax: 8 } as never)).toThrow(
      /"inflightMax": is not a known option \(did you mean inFlightMax\?\)/,
    );
  });
});

describe('regression: a partial config is merged over DEFAULT_RUNTIME_CONFIG', () => {
  it('fields left out take the default runtime config, groups alone hash at their block size', async () => {
    const small = { maxRequests: 4, gpuBlocks: 2048, tierChunks: 1024, maxBlocksPerRequest: 256 };
    const rt = await OffloadRuntime.start({
      config: { ...small, groups: [{ kind: 'full', tokensPerBlock: 8 }] },
    });
    try {
      expect(rt.config.blocksPerChunk).toBe(DEFAULT_RUNTIME_CONFIG.blocksPerChunk);
      expect(rt.config.bytesPerBlock).toBe(DEFAULT_RUNTIME_CONFIG.bytesPerBlock);
      expect(rt.config.tokensPerHash).toBe(8);
      expect(rt.config.gpuBlocks).toBe(2048);
      const summary = await rt.submit({ promptLength: 256, maxDecodeTokens: 2 });
      expect(summary.status).toBe('finished');
      expect(summary.chunksStored).toBeGreaterThan(0);
    } finally {
      await rt.close();
    }
  });
});
