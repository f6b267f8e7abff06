// The runtime's load path uses the one lookup decision: the same hybrid prompt
// submitted three times hits on the second and third request in every run,
// whatever the copy threads' speed (issue 16's repeat); a request that would
// load chunks another request is loading is deferred and then hits.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import { lookupWaitMs } from '../../src/lookup.js';
import { DEFAULT_ENGINE_OPTIONS, resolveEngineOptions } from '../../src/runtime/engine-options.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { readStat } from '../../src/runtime/stats.js';
import {
  decodeLookup,
  encodeLookup,
  lookupTokensThatFit,
} from '../../src/runtime/lookup-record.js';
import { SpscRing } from '../../src/runtime/rings.js';
import { UNPACED_ENGINE, oneThreadLoops, repeatedPrompt } from '../helpers/one-thread-loops.js';
import { checkAndClose, settle } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

const REPEAT = { promptLength: 4096, prefixId: 7, sharedPrefixTokens: 4096, maxDecodeTokens: 4 };

describe('regression: a repeated hybrid prompt hit nothing when its window slid past chunks the store had not taken (issue 16)', () => {
  it('the second and third of three equal 4,096-token prompts hit 63 chunks (the default hybrid model)', async () => {
    const rt = await OffloadRuntime.start();
    const summaries = [];
    for (let i = 0; i < 3; i += 1) {
      summaries.push(await rt.submit(REPEAT));
      // Its copies done before the next lookup, not a fixed 300 ms (one store pass at load 40).
      await settle(rt);
    }
    expect(summaries.map((s) => s.status)).toEqual(['finished', 'finished', 'finished']);
    expect(summaries[0]!.hitChunks).toBe(0);
    // Every chunk of both groups was stored: the sliding window never slid past an unstored chunk.
    expect(summaries[0]!.chunksStored).toBe(128);
    // 4,095 tokens may hit (the last is recomputed): 63 chunks of 64 after the EAGLE tail.
    expect(summaries[1]!.hitChunks).toBe(63);
    expect(summaries[2]!.hitChunks).toBe(63);
    await checkAndClose(rt, summaries);
  });

  it('hits too when the copies of the first request are still in flight at the second lookup (deferred, then hit)', async () => {
    const rt = await OffloadRuntime.start({ transferDelayMs: 20 });
    const first = await rt.submit(REPEAT);
    const second = await rt.submit(REPEAT);
    expect(first.hitChunks).toBe(0);
    expect(second.hitChunks).toBe(63);
    await checkAndClose(rt, [first, second]);
  });
});

describe('the runtime loops from one thread', () => {
  it('a second request that would load what another is loading is deferred, then hits', async () => {
    const loops = await oneThreadLoops({
      config: SMALL_HYBRID,
      engine: UNPACED_ENGINE,
      allocatorLag: { publishDelayMs: 1, jitterMs: 0, seed: 5 },
    });
    const { ended, store, views } = loops;
    const runUntil = (done: () => boolean) => expect(loops.runUntil(done, 100_000)).toBe(true);
    const submit = (requestId: number) => loops.submit(repeatedPrompt(requestId));
    submit(1);
    runUntil(() => ended.length === 1 && store.jobsInFlight === 0);
    // Both arrive together: the first to look up locks the prefix for its load, the other waits for it.
    submit(2);
    submit(3);
    runUntil(() => ended.length === 3);
    // 400 tokens: 399 may hit, 49 whole chunks after the EAGLE tail of the full-attention group.
    expect(ended.map((s) => [s.requestId, s.hitChunks])).toEqual([
      [1, 0],
      [2, 49],
      [3, 49],
    ]);
    expect(readStat(views.stats, 'lookupsDeferred')).toBeGreaterThan(0);
    expect(readStat(views.stats, 'loadMismatches')).toBe(0);
  });
});

describe('external mode: a host engine uses the same lookup and load', () => {
  const HYBRID = {
    groups: [
      { kind: 'full' as const, tokensPerBlock: 4, eagle: true },
      { kind: 'sliding-window' as const, tokensPerBlock: 4, windowTokens: 16 },
    ],
    blocksPerChunk: 2,
    tokensPerHash: 4,
    maxRequests: 8,
    maxBlocksPerRequest: 128,
    gpuBlocks: 512,
    tierChunks: 256,
    bytesPerBlock: 64,
  };

  it('stores a prompt, looks it up, loads the hit into new blocks with the right bytes', async () => {
    const rt = await OffloadRuntime.start({ config: HYBRID, external: true });
    const host = rt.external;
    const hashing = await loadHashing();
    const prompt = Array.from({ length: 66 }, (_, i) => (i * 13 + 5) % 997);
    const keys = promptKeys(rt.config, hashing, prompt);
    expect(await host.lookup(prompt)).toMatchObject({ deferred: false, hitTokens: 0 });

    // The first request computes the whole prompt: 17 blocks per group, 8 whole chunks keyed.
    const a = host.scheduler.open({ requestId: 1, promptTokens: prompt });
    for (let g = 0; g < 2; g += 1) {
      const blocks = host.pool.allocate(17)!;
      for (let p = 0; p < 16; p += 1) host.roles.writeBlock(blocks[p]!, keys[g]![p >> 1]!, p);
      host.allocator.appendBlocks(a, g, blocks);
    }
    host.scheduler.progress(a, 66, 0);
    host.scheduler.finish(a);
    await host.whenDrained(a);
    host.release(a);
    await settle(rt);

    // The last copies may still be in flight: a deferred answer means ask again (bounded here).
    let answer = await host.lookup(prompt);
    for (let tries = 0; answer.deferred && tries < 2000; tries += 1) {
      await new Promise((r) => setTimeout(r, 5));
      answer = await host.lookup(prompt);
    }
    if (answer.deferred) throw new Error('still deferred after the copies had 10 s');
    // 65 tokens may hit; the EAGLE group's widened query hits 8 chunks and drops the last: 7.
    expect(answer.hitTokens).toBe(56);
    expect(answer.hitChunks).toEqual([7, 7]);
    const b = host.scheduler.open({
      requestId: 2,
      promptTokens: prompt,
      hitChunks: answer.hitChunks,
    });
    host.allocator.appendBlocks(b, 0, host.pool.allocate(14)!);
    // The window ends at the hit (2 chunks = 4 blocks); below it the SW group holds null blocks.
    host.allocator.appendBlocks(b, 1, [
      ...new Array<number>(10).fill(0),
      ...host.pool.allocate(4)!,
    ]);
    const loaded = await host.load(b, answer);
    expect(loaded).toEqual({
      ok: true,
      blocksLoaded: 18,
      mismatches: 0,
      loadedTokens: answer.hitTokens,
    });
    expect(rt.stats().mismatches).toBe(0);
    // A hit that is not loaded is given back.
    const again = await host.lookup(prompt);
    expect(again.deferred === false && again.hitTokens).toBe(56);
    host.cancel(again);
    await expect(host.load(b, again)).rejects.toBeInstanceOf(InvalidArgumentError);
    host.scheduler.abort(b);
    await host.whenDrained(b);
    host.release(b);
    await settle(rt);
    await rt.close();
    expect(rt.leakReport()).toMatchObject({
      blocksInUse: 0,
      pinsOutstanding: 0,
      slotsInUse: 0,
      tierEntriesReading: 0,
    });
  });
});

describe('the lookup record', () => {
  it('covers as much of the prompt as a ring record holds, and round-trips', () => {
    const config = resolveConfig(SMALL_HYBRID); // 2 groups, 8-token chunks of 2 blocks
    const ring = SpscRing.create(256);
    const tokens = lookupTokensThatFit(config, 400, ring.recordWordsMax);
    // 127 words: 5 header words + 7 chunks x 2 groups x 8 words (a key is 256 bits); a load of 7 chunks is 2 + 28 words.
    expect(tokens).toBe(57);
    expect(lookupTokensThatFit(config, 30, ring.recordWordsMax)).toBe(30);
    // Whole 256-bit keys: every word of each travels.
    const keys = [0, 1].map((g) =>
      [0, 1, 2, 3, 4, 5, 6].map((c) => (BigInt(g * 100 + c) << 192n) | BigInt(c * 7 + 1)),
    );
    const record = encodeLookup(config, 9, tokens, true, (g, c) => keys[g]![c]!);
    expect(record.length).toBeLessThanOrEqual(ring.recordWordsMax);
    expect(ring.push(record)).toBe(true);
    // The request's load limits travel with it.
    const limited = { maxLoadTokens: 24, skipReadingPrefixCache: true };
    expect(
      ring.push(encodeLookup(config, 10, tokens, false, (g, c) => keys[g]![c]!, limited)),
    ).toBe(true);
    const decoded: unknown[] = [];
    while (ring.pop((r) => decoded.push(decodeLookup(config, r)))) {
      /* drain */
    }
    expect(decoded).toEqual([
      {
        tag: 9,
        numTokens: 57,
        force: true,
        maxLoadTokens: undefined,
        skipReadingPrefixCache: false,
        keys,
      },
      { tag: 10, numTokens: 57, force: false, ...limited, keys },
    ]);
  });
});

describe('the lookup wait bound scales with the prompt', () => {
  it('is a base plus a term per 1,000 prompt tokens, 2 s + 0.5 s per 1,000 by default', () => {
    const { lookupWaitBaseMs: base, lookupWaitPerThousandTokensMs: perK } = DEFAULT_ENGINE_OPTIONS;
    expect(lookupWaitMs(100, base, perK)).toBe(2050);
    expect(lookupWaitMs(4096, base, perK)).toBe(4048);
    expect(lookupWaitMs(100_000, base, perK)).toBe(52_000);
    expect(lookupWaitMs(100_000, 5000, 0)).toBe(5000); // the old fixed bound, as a setting
  });
  it('bad settings are InvalidArgumentError naming the option, before any worker starts', async () => {
    for (const [name, value] of [
      ['lookupWaitBaseMs', -1],
      ['lookupWaitBaseMs', 0.5],
      ['lookupWaitBaseMs', 600_001],
      ['lookupWaitPerThousandTokensMs', -1],
      ['lookupWaitPerThousandTokensMs', Number.NaN],
      ['lookupWaitPerThousandTokensMs', Infinity],
      ['lookupWaitPerThousandTokensMs', '250'],
    ] as const) {
      const err = await OffloadRuntime.start({ simulator: { [name]: value } }).catch(
        (e: unknown) => e,
      );
      expect(err, `${name}=${String(value)}`).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toContain(`simulator.${name}`);
    }
    const o = resolveEngineOptions({ lookupWaitBaseMs: 0, lookupWaitPerThousandTokensMs: 0.5 }, 4);
    expect(lookupWaitMs(2000, o.lookupWaitBaseMs, o.lookupWaitPerThousandTokensMs)).toBe(1);
  });
});
