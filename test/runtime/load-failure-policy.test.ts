// The load-failure policy (vLLM's kv_load_failure_policy) on real tiers: one
// chunk in the middle of a hit fails to load, on the host tier through a
// failed copy (the transfer fault switch, target 'load') and on a disk tier
// whose entry file was rewritten from outside (its CRC no longer holds).
// 'recompute' (the default) keeps the chunks before the failed one and
// recomputes from there, never from token zero (vLLM's test_sync_load_failure:
// num_computed_tokens == first invalid block * block_size); 'fail' fails that
// request with LoadFailedError (vLLM's test_sync_load_fail_policy:
// FINISHED_ERROR) and the runtime goes on serving the others. Every run ends
// with 0 mismatched bytes, verify() clean and nothing left pinned or locked.
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LoadFailedError } from '../../src/errors.js';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import { readIdentity } from '../../src/identity.js';
import type { LoadFailurePolicy } from '../../src/lookup.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RuntimeOptions } from '../../src/runtime/runtime.js';
import { VALUE_HEADER_BYTES } from '../../src/tier/value.js';
import { NO_LEAKS } from '../helpers/runtime.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Full attention, 64-token chunks: a 640-token prompt is 10 chunks. */
const FULL = {
  ...DEFAULT_RUNTIME_CONFIG,
  groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
  blocksPerChunk: 4,
  namespace: { model: 'load-failure-policy' },
};
const TPC = 64;
const PROMPT = Array.from({ length: 640 }, (_, i) => (i * 7919 + 13) % 50_000);

async function start(options: RuntimeOptions): Promise<OffloadRuntime> {
  return OffloadRuntime.start({ config: FULL, simulator: { seed: 3 }, ...options });
}

async function closeClean(rt: OffloadRuntime): Promise<void> {
  const verify = await rt.verify();
  expect(verify).toMatchObject({ ok: true, mismatches: 0 });
  expect(rt.stats().mismatches).toBe(0);
  await rt.close();
  expect(rt.leakReport()).toEqual(NO_LEAKS);
}

const request = { promptTokens: PROMPT, maxDecodeTokens: 2 };

describe("loadFailurePolicy with tensor-parallel ranks: one rank's shard of the middle chunk fails", () => {
  // The fault fails the last writing rank's copy (rank 0 in a replicated
  // layout, where the others copy nothing): the chunk whose shard failed is the
  // first failed chunk, whichever rank it was; every rank's bytes are counted.
  it.each([
    ['sharded', 2],
    ['sharded', 4],
    ['replicated', 2],
  ] as const)(
    "%s over %i ranks, 'recompute': recomputed from the chunk whose shard failed; bytes counted per rank copy",
    async (rankLayout, ranks) => {
      const rt = await OffloadRuntime.start({
        config: { ...FULL, ranks, rankLayout },
        simulator: { seed: 3 },
        transferThreads: 2,
        faultInjection: { role: 'transfer', target: 'load', afterSteps: 0, count: 1 },
      });
      await rt.submit(request);
      const second = await rt.submit(request);
      const hit = second.hitChunks;
      expect(hit).toBeGreaterThanOrEqual(8);
      expect(second.status).toBe('finished');
      const s = rt.stats();
      expect(s.loadFailures).toBe(1);
      expect(s.loadFailureTokensRecomputed).toBe((hit - Math.floor(hit / 2)) * TPC);
      expect(s.tierHits).toBe(Math.floor(hit / 2));
      const third = await rt.submit(request);
      expect(third.hitChunks).toBe(hit);
      // Bytes read: each rank's copy of the failed load (the failed rank's up
      // to its failed entry), then the whole blocks of the third's load.
      const block = 256; // FULL.bytesPerBlock (the default)
      expect(rt.config.bytesPerBlock).toBe(block);
      const blocks = hit * FULL.blocksPerChunk;
      const failedBlocks = Math.floor(hit / 2) * FULL.blocksPerChunk;
      const failedLoad =
        rankLayout === 'replicated'
          ? failedBlocks * block
          : ((ranks - 1) * blocks + failedBlocks) * (block / ranks);
      expect(rt.stats().tiers.host.bytesRead).toBe(failedLoad + blocks * block);
      await closeClean(rt);
    },
    60_000,
  );

  it("'fail' over 2 ranks: the request rejects naming the chunk whose shard failed; the next loads every shard", async () => {
    const rt = await OffloadRuntime.start({
      config: { ...FULL, ranks: 2 },
      simulator: { seed: 3 },
      transferThreads: 2,
      loadFailurePolicy: 'fail',
      faultInjection: { role: 'transfer', target: 'load', afterSteps: 0, count: 1 },
    });
    await rt.submit(request);
    const failed = await rt.submit(request).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(LoadFailedError);
    const err = failed as LoadFailedError;
    expect(err.firstFailedChunk).toBe(Math.floor(err.hitChunks / 2));
    const next = await rt.submit(request);
    expect(next).toMatchObject({ status: 'finished', hitChunks: err.hitChunks });
    expect(rt.stats()).toMatchObject({ loadFailures: 1, requestsFailedByLoad: 1 });
    await closeClean(rt);
  }, 60_000);
});

describe('loadFailurePolicy on the host tier: the copy of the hit fails at its middle chunk', () => {
  it("'recompute' (the default): the chunks before the failed one count as loaded, the rest is recomputed", async () => {
    // The first load (the second request's) fails; the third request's loads whole.
    const rt = await start({
      faultInjection: { role: 'transfer', target: 'load', afterSteps: 0, count: 1 },
    });
    const first = await rt.submit(request);
    expect(first.hitChunks).toBe(0);
    const second = await rt.submit(request);
    const hit = second.hitChunks;
    expect(hit).toBeGreaterThanOrEqual(8);
    expect(second.status).toBe('finished');
    const s = rt.stats();
    expect(s.loadFailures).toBe(1);
    // Recomputed from chunk floor(hit / 2), not from token 0.
    expect(s.loadFailureTokensRecomputed).toBe((hit - Math.floor(hit / 2)) * TPC);
    expect(s.requestsFailedByLoad).toBe(0);
    // Only the sound prefix counts as a tier hit.
    expect(s.tierHits).toBe(Math.floor(hit / 2));
    const third = await rt.submit(request);
    expect(third.hitChunks).toBe(hit);
    expect(rt.stats().tierHits).toBe(Math.floor(hit / 2) + hit);
    await closeClean(rt);
  }, 60_000);

  it("'fail': that request rejects with LoadFailedError naming the chunk; the next is served", async () => {
    const rt = await start({
      loadFailurePolicy: 'fail',
      faultInjection: { role: 'transfer', target: 'load', afterSteps: 0, count: 1 },
    });
    await rt.submit(request);
    const failed = await rt.submit(request).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(LoadFailedError);
    const err = failed as LoadFailedError;
    expect(err.code).toBe('KVOFF_LOAD_FAILED');
    expect(err.firstFailedChunk).toBe(Math.floor(err.hitChunks / 2));
    const next = await rt.submit(request);
    expect(next.status).toBe('finished');
    expect(next.hitChunks).toBe(err.hitChunks);
    const s = rt.stats();
    expect(s).toMatchObject({
      loadFailures: 1,
      requestsFailedByLoad: 1,
      loadFailureTokensRecomputed: 0,
    });
    await closeClean(rt);
  }, 60_000);

  it('a sliding-window group holds only the window of the hit: a failure in the middle recomputes from 0 (vLLM falls back to the whole request on such layouts)', async () => {
    const rt = await OffloadRuntime.start({
      config: { ...DEFAULT_RUNTIME_CONFIG, namespace: { model: 'load-failure-hybrid' } },
      simulator: { seed: 3 },
      faultInjection: { role: 'transfer', target: 'load', afterSteps: 0, count: 1 },
    });
    const long = {
      promptTokens: Array.from({ length: 2048 }, (_, i) => i % 977),
      maxDecodeTokens: 2,
    };
    await rt.submit(long);
    const second = await rt.submit(long);
    expect(second.status).toBe('finished');
    const s = rt.stats();
    expect(s.loadFailures).toBe(1);
    const tpc = rt.config.groups[0]!.tokensPerChunk;
    expect(s.loadFailureTokensRecomputed).toBe(second.hitChunks * tpc);
    expect(s.tierHits).toBe(0);
    await closeClean(rt);
  }, 60_000);

  it('start() refuses an unknown policy with InvalidArgumentError naming the option', async () => {
    await expect(
      start({ loadFailurePolicy: 'retry' as unknown as LoadFailurePolicy }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(
      start({ loadFailurePolicy: 'retry' as unknown as LoadFailurePolicy }),
    ).rejects.toThrow(/loadFailurePolicy/);
  });
});

/** Every entry file under `dir`. */
function entryFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...entryFiles(p));
    else if (name.endsWith('.kv')) out.push(p);
  }
  return out;
}

/** Flips a payload byte of the file holding `key` (found by the identity in its header). */
function corruptEntry(dir: string, key: bigint): void {
  for (const f of entryFiles(dir)) {
    const bytes = readFileSync(f);
    if (readIdentity(bytes, 24) !== key) continue;
    bytes[VALUE_HEADER_BYTES + 5]! ^= 0xff;
    writeFileSync(f, bytes);
    return;
  }
  throw new Error(`no entry file holds key ${key.toString(16)}`);
}

describe('loadFailurePolicy on a disk tier: an entry in the middle of the hit rewritten from outside', () => {
  async function storedThenCorrupted(): Promise<{ dir: string; chunks: number }> {
    const dir = mkdtempSync(join(tmpdir(), 'kvoff-load-failure-'));
    dirs.push(dir);
    const rt = await start({ tiers: { disk: { dir } } });
    await rt.submit(request);
    await closeClean(rt);
    expect(rt.stats().tiers.disk.storedChunks).toBeGreaterThanOrEqual(9);
    const keys = promptKeys(rt.config, await loadHashing(rt.config.keyHash), PROMPT)[0]!;
    corruptEntry(dir, keys[4]!);
    return { dir, chunks: keys.length };
  }

  it("'recompute': the hit stops before the refused chunk, which is recomputed and stored again", async () => {
    const { dir } = await storedThenCorrupted();
    const rt = await start({ tiers: { disk: { dir } } });
    const s1 = await rt.submit(request);
    expect(s1.status).toBe('finished');
    expect(s1.hitChunks).toBe(4);
    const s = rt.stats();
    expect(s.loadFailures).toBe(1);
    expect(s.loadFailureTokensRecomputed).toBeGreaterThanOrEqual((9 - 4) * TPC);
    expect(s.tiers.disk.errors).toBe(1);
    expect(s.tierHits).toBe(4);
    await closeClean(rt);
  }, 60_000);

  it("'fail': the request rejects with LoadFailedError at the refused chunk; the next is served", async () => {
    const { dir } = await storedThenCorrupted();
    const rt = await start({ tiers: { disk: { dir } }, loadFailurePolicy: 'fail' });
    const failed = await rt.submit(request).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(LoadFailedError);
    expect((failed as LoadFailedError).firstFailedChunk).toBe(4);
    expect((failed as LoadFailedError).hitChunks).toBeGreaterThanOrEqual(9);
    // The refused entry was deleted: the next request hits the sound prefix and recomputes the rest.
    const next = await rt.submit(request);
    expect(next.status).toBe('finished');
    expect(next.hitChunks).toBe(4);
    expect(rt.stats()).toMatchObject({ loadFailures: 1, requestsFailedByLoad: 1 });
    await closeClean(rt);
  }, 60_000);
});

describe('loadFailurePolicy through the external host API (the copy of its load fails at the middle chunk)', () => {
  const config = {
    groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
    blocksPerChunk: 2,
    tokensPerHash: 4,
    maxRequests: 8,
    maxBlocksPerRequest: 128,
    gpuBlocks: 512,
    tierChunks: 256,
    bytesPerBlock: 64,
  };
  const prompt = Array.from({ length: 66 }, (_, i) => (i * 13 + 5) % 997);

  async function storedThenLoaded(policy: LoadFailurePolicy) {
    const rt = await OffloadRuntime.start({
      external: true,
      config,
      loadFailurePolicy: policy,
      faultInjection: { role: 'transfer', target: 'load', afterSteps: 0, count: 1 },
    });
    const host = rt.external;
    const keys = promptKeys(rt.config, await loadHashing(rt.config.keyHash), prompt)[0]!;
    const a = host.scheduler.open({ requestId: 1, promptTokens: prompt });
    const blocks = host.pool.allocate(17)!;
    for (let p = 0; p < 16; p += 1) host.roles.writeBlock(blocks[p]!, keys[p >> 1]!, p);
    host.allocator.appendBlocks(a, 0, blocks);
    host.scheduler.progress(a, prompt.length, 0);
    host.scheduler.finish(a);
    await host.whenDrained(a);
    host.release(a);
    let answer = await host.lookup(prompt);
    for (let tries = 0; answer.deferred && tries < 1000; tries += 1) {
      await new Promise((r) => setTimeout(r, 5));
      answer = await host.lookup(prompt);
    }
    if (answer.deferred) throw new Error('still deferred');
    expect(answer.hitTokens).toBe(64);
    const b = host.scheduler.open({
      requestId: 2,
      promptTokens: prompt,
      hitChunks: answer.hitChunks,
    });
    host.allocator.appendBlocks(b, 0, host.pool.allocate(16)!);
    const loaded = await host.load(b, answer).then(
      (r) => r,
      (e: unknown) => e,
    );
    host.scheduler.abort(b);
    await host.whenDrained(b);
    host.release(b);
    const stats = rt.stats();
    await rt.close();
    expect(rt.leakReport()).toMatchObject({
      pinsOutstanding: 0,
      tierEntriesReading: 0,
      loadLocks: 0,
    });
    return { loaded, stats };
  }

  it("'recompute': load() says the copy failed and the first 4 of 8 chunks count as loaded (32 tokens), each verified", async () => {
    const { loaded, stats } = await storedThenLoaded('recompute');
    expect(loaded).toEqual({ ok: false, blocksLoaded: 16, mismatches: 0, loadedTokens: 32 });
    expect(stats).toMatchObject({
      loadFailures: 1,
      loadFailureTokensRecomputed: 32,
      mismatches: 0,
    });
  }, 60_000);

  it("'fail': load() throws LoadFailedError at chunk 4 of 8", async () => {
    const { loaded, stats } = await storedThenLoaded('fail');
    expect(loaded).toBeInstanceOf(LoadFailedError);
    expect(loaded).toMatchObject({ firstFailedChunk: 4, hitChunks: 8 });
    expect(stats).toMatchObject({ loadFailures: 1, requestsFailedByLoad: 1 });
  }, 60_000);
});
