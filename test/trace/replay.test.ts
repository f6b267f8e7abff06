// The two modes of a trace replay agree: with a window of one request, the
// threaded runtime (real workers, real copies) and the cache mode (the tier's
// index and policy alone) give every request of a slice the same hit, at a
// capacity small enough to evict, under LRU with a store threshold of 2, whose
// lookup counting runs in the store thread (had it counted only up to the
// first miss, as vLLM did before #52022, these 80 requests would hit 2,048
// tokens instead of 46,592). The threaded run ends with no hole and every
// stored byte verified.
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import type { Hashing } from '../../src/hashing.js';
import { replayCache } from '../../src/trace/cache-replay.js';
import { replayThreaded, traceRuntimeConfig } from '../../src/trace/threaded-replay.js';
import { readTrace } from '../../src/trace/trace.js';
import type { CachePolicyName } from '../../src/tier/policy/index.js';

const slice = (name: string, requests: number) =>
  readTrace(fileURLToPath(new URL(`../fixtures/mooncake/${name}`, import.meta.url)), {
    limit: requests,
  });

let hashing: Hashing;
beforeAll(async () => {
  hashing = await loadHashing();
});

describe('trace replay: threaded runtime and cache mode', () => {
  // vLLM's ARC at 200,000 tokens, on the first 50 requests, is the CLI test's case
  // (test/cli/trace.test.ts), through the built command.
  it.each([['synthetic-slice.jsonl', 80, 'lru', 2, 100_000]] as const)(
    '%s, first %i requests, %s, store threshold %i: the same hit for every request at %i tokens',
    async (name, requests, policy: CachePolicyName, storeThreshold, capacityTokens) => {
      const trace = slice(name, requests);
      const cacheHits: number[] = [];
      const cache = replayCache(trace, hashing, {
        tokensPerChunk: 512,
        capacityTokens,
        policy,
        storeThreshold,
        onRequest: (i, h) => (cacheHits[i] = h),
      });
      // The comparison means something: hits, and evictions under the policy.
      expect(cache.trace.hitTokens).toBeGreaterThan(0);
      expect(cache.evictions).toBeGreaterThan(0);
      // 64-token blocks, 8 per chunk: the same 512-token chunks as the cache mode's,
      // with a quarter of the blocks and hashes of 16-token ones (a shorter test).
      const config = traceRuntimeConfig(trace, hashing, {
        groups: [{ kind: 'full', tokensPerBlock: 64 }],
        blocksPerChunk: 8,
        bytesPerBlock: 8,
        gpuTokens: 262_144,
        capacityTokens,
      });
      const threadHits: number[] = [];
      const threads = await replayThreaded(trace, {
        config,
        cache: { policy, storeThreshold },
        window: 1,
        // Prompts alone are offloaded: the outputs' decode steps would only make the test longer.
        outputTokensMax: 1,
        onRequest: (i, h) => (threadHits[i] = h),
      });
      expect(threadHits).toEqual(cacheHits);
      expect(threads.trace).toEqual(cache.trace);
      expect(threads.hitTokensByTier.host).toBe(cache.trace.hitTokens);
      expect(threads.chunksDroppedForCapacity).toBe(cache.chunksDroppedForCapacity);
      expect(threads.completed).toBe(requests);
      expect(threads.holes).toBe(0);
      expect(threads.mismatches).toBe(0);
      expect(threads.verifyOk).toBe(true);
    },
  );
});
