// The cache mode keys a trace's chunks from hash IDs alone (chunkKeys); the
// token path keys them as any prompt is keyed, over the synthesized tokens
// (promptKeys: the hasher's chain). On slices of both traces the two must be
// the same relation (two chunks share a chunk key exactly when they share a
// token key), and the cache replay must give every request the same hit with
// either, under every policy.
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { loadHashing } from '../../src/hashing.js';
import type { Hashing } from '../../src/hashing.js';
import { promptKeys } from '../../src/hashing.js';
import { replayCache } from '../../src/trace/cache-replay.js';
import { chunkKeys, promptTokens } from '../../src/trace/tokens.js';
import { readTrace } from '../../src/trace/trace.js';
import type { Trace } from '../../src/trace/trace.js';
import { CACHE_POLICIES } from '../../src/tier/policy/index.js';

const fixture = (name: string, limit?: number) =>
  readTrace(
    fileURLToPath(new URL(`../fixtures/mooncake/${name}`, import.meta.url)),
    limit !== undefined ? { limit } : {},
  );

/** Token-path keys are the slow part (every token synthesized and hashed): computed once per case. */
const tokenKeysMemo = new Map<string, bigint[][]>();

function tokenKeys(hashing: Hashing, trace: Trace, tokensPerBlock: number, blocksPerChunk: number) {
  const longest = Math.max(...trace.requests.map((r) => r.inputLength));
  const config = resolveConfig({
    groups: [{ kind: 'full', tokensPerBlock }],
    blocksPerChunk,
    tokensPerHash: tokensPerBlock,
    maxRequests: 1,
    maxBlocksPerRequest: Math.ceil(longest / tokensPerBlock / blocksPerChunk + 1) * blocksPerChunk,
    gpuBlocks: 2,
    tierChunks: 1,
  });
  const memo = `${trace.source}:${trace.requests.length}:${tokensPerBlock}x${blocksPerChunk}`;
  let keys = tokenKeysMemo.get(memo);
  if (keys === undefined) {
    keys = trace.requests.map((r) => promptKeys(config, hashing, promptTokens(r, 512))[0]!);
    tokenKeysMemo.set(memo, keys);
  }
  return keys;
}

let hashing: Hashing;
beforeAll(async () => {
  hashing = await loadHashing();
});

describe.each(['conversation-slice.jsonl', 'synthetic-slice.jsonl'])('%s', (name) => {
  it.each([
    [16, 32, 150], // 512-token chunks: one per trace block
    [16, 8, 100], // 128-token chunks: four per block, the last block cut at whole chunks
  ])(
    'chunk keys and token keys are the same relation (%i tokens x %i blocks, %i requests)',
    (tpb, bpc, requests) => {
      const trace = fixture(name, requests);
      const tpc = tpb * bpc;
      const byToken = tokenKeys(hashing, trace, tpb, bpc);
      const tokenToChunk = new Map<bigint, bigint>();
      const chunkToToken = new Map<bigint, bigint>();
      let shared = 0;
      trace.requests.forEach((r, i) => {
        const ck = chunkKeys(hashing, r, 512, tpc);
        const tk = byToken[i]!;
        expect(ck).toHaveLength(Math.floor(r.inputLength / tpc));
        expect(tk).toHaveLength(ck.length);
        ck.forEach((c, j) => {
          const t = tk[j]!;
          if (tokenToChunk.has(t)) shared += 1;
          expect(tokenToChunk.get(t) ?? c).toBe(c);
          expect(chunkToToken.get(c) ?? t).toBe(t);
          tokenToChunk.set(t, c);
          chunkToToken.set(c, t);
        });
      });
      // The slices reuse prefixes: the relation is checked on real sharing.
      expect(shared).toBeGreaterThan(50);
    },
  );

  it('the cache replay gives every request the same hit with either key, under every policy', () => {
    const trace = fixture(name, 150);
    const byToken = tokenKeys(hashing, trace, 16, 32);
    for (const policy of CACHE_POLICIES) {
      for (const [capacityTokens, storeThreshold] of [
        [0, 1],
        [100_000, 1],
        [50_000, 2],
      ] as const) {
        const a: number[] = [];
        const b: number[] = [];
        const base = { tokensPerChunk: 512, capacityTokens, policy, storeThreshold };
        const chunk = replayCache(trace, hashing, { ...base, onRequest: (i, h) => (a[i] = h) });
        const token = replayCache(trace, hashing, {
          ...base,
          keysOf: (_r, i) => byToken[i]!,
          onRequest: (i, h) => (b[i] = h),
        });
        expect(b).toEqual(a);
        expect(token.evictions).toBe(chunk.evictions);
        expect(chunk.trace.hitTokens).toBeGreaterThan(0);
        if (capacityTokens > 0) expect(chunk.evictions).toBeGreaterThan(0);
      }
    }
  });
});
