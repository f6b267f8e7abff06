// reset() on the threaded runtime (vLLM's reset_cache, and with `shared`
// reset_prefix_cache's reset_external): the host tier is emptied; copies in
// flight finish and publish nothing; live requests store their chunks again;
// nothing is lost, stored twice or leaked. `shared: true` retires the
// namespace's disk and Redis entries for every instance, and only theirs.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { InvalidArgumentError, SharedResetFailedError } from '../../src/errors.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { DiskTier } from '../../src/tier/disk-tier.js';
import { encodeValue } from '../../src/tier/value.js';
import { settle } from '../failure-classes/lower-tier-support.js';

const run = promisify(execFile);
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'kvoff-reset-'));
  dirs.push(d);
  return d;
}

// Full attention only: what a windowed group stored depends on thread timing, hits here must not.
const CONFIG: ConfigInput = {
  ...DEFAULT_RUNTIME_CONFIG,
  groups: [{ kind: 'full', tokensPerBlock: 16 }],
  maxBlocksPerRequest: 512,
  namespace: { model: 'reset-test' },
};
const PROMPT = { promptLength: 3000, prefixId: 7, maxDecodeTokens: 8 };

async function expectClean(rt: OffloadRuntime): Promise<void> {
  const report = await rt.verify();
  expect(report).toMatchObject({ ok: true, mismatches: 0, holes: 0, doubleStores: 0 });
  await rt.close();
  expect(rt.stats()).toMatchObject({ holes: 0, mismatches: 0 });
  expect(rt.leakReport()).toMatchObject({
    pinsOutstanding: 0,
    blocksInUse: 0,
    tierEntriesWriting: 0,
    tierEntriesReading: 0,
    jobsInFlight: 0,
    slotsInUse: 0,
  });
}

describe('OffloadRuntime.reset', () => {
  it('empties the host tier: the next request misses and stores again, the one after hits', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, simulator: { seed: 2 } });
    await rt.submit(PROMPT);
    expect((await rt.submit(PROMPT)).hitChunks).toBeGreaterThan(0);
    const used = rt.stats().tierUsed;
    expect(used).toBeGreaterThan(0);
    await rt.reset();
    expect(rt.stats()).toMatchObject({ tierUsed: 0, resets: 1 });
    expect((await rt.submit(PROMPT)).hitChunks).toBe(0);
    expect(rt.stats().tierUsed).toBe(used);
    expect((await rt.submit(PROMPT)).hitChunks).toBeGreaterThan(0);
    await expectClean(rt);
  }, 120_000);

  it('resets while requests run and copies are in flight lose nothing, store nothing twice, leak nothing', async () => {
    const rt = await OffloadRuntime.start({
      config: CONFIG,
      simulator: { seed: 3 },
      // Slow copies: stores are in flight when the resets come.
      transferDelayMs: 20,
    });
    const runs = Array.from({ length: 6 }, (_, i) =>
      rt.submit({ promptLength: 2500 + 100 * i, prefixId: i % 2, maxDecodeTokens: 64 }),
    );
    let resets = 0;
    let done = false;
    void Promise.all(runs).finally(() => (done = true));
    // Until a reset found stores in flight (and at least three resets), while the requests run.
    while (!done && (resets < 3 || rt.stats().chunksDiscardedByReset === 0) && resets < 200) {
      await new Promise((r) => setTimeout(r, 10));
      await rt.reset();
      resets += 1;
    }
    const summaries = await Promise.all(runs);
    expect(summaries.every((s) => s.holes === 0)).toBe(true);
    expect(rt.stats().resets).toBe(resets);
    expect(rt.stats().chunksDiscardedByReset).toBeGreaterThan(0);
    await expectClean(rt);
  }, 120_000);

  it('refuses bad options with a typed error and is a no-op with offload off', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, simulator: { seed: 4 } });
    await expect(rt.reset({ shared: 'yes' } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(rt.reset(null as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    // Shared with no lower tier: nothing to retire, the host tier is reset.
    await rt.reset({ shared: true });
    await rt.close();
    const off = await OffloadRuntime.start({ config: CONFIG, offload: false });
    await off.reset();
    await off.close();
  }, 120_000);
});

describe('ExternalHost.reset', () => {
  it('a hit looked up before the reset still loads, byte for byte, publishes nothing, and the request stores its chunks again', async () => {
    const rt = await OffloadRuntime.start({
      external: true,
      config: {
        groups: [{ kind: 'full', tokensPerBlock: 4 }],
        // One block per chunk (a partial config merges over the runtime's default of 4).
        blocksPerChunk: 1,
        tokensPerHash: 4,
        maxRequests: 4,
        maxBlocksPerRequest: 16,
        gpuBlocks: 64,
        tierChunks: 16,
        bytesPerBlock: 64,
      },
    });
    try {
      const host = rt.external;
      const prompt = Array.from({ length: 17 }, (_, i) => (i * 31 + 5) % 1000);
      const keys = promptKeys(rt.config, await loadHashing(), prompt)[0]!;
      /** Runs a request over `blocks` (its bytes written first) to its drain and release. */
      const runToEnd = async (h: RequestHandle) => {
        host.scheduler.progress(h, prompt.length, 0);
        host.scheduler.appendTokens(h, [3]);
        host.scheduler.finish(h);
        host.allocator.settle(h);
        await host.whenDrained(h);
        host.release(h);
      };
      const a = host.scheduler.open({ requestId: 1, promptTokens: prompt });
      const blocks = host.pool.allocate(5)!;
      for (let p = 0; p < 4; p += 1) host.roles.writeBlock(blocks[p]!, keys[p]!, p);
      host.allocator.appendBlocks(a, 0, blocks);
      await runToEnd(a);
      let answer = await host.lookup(prompt);
      for (let tries = 0; answer.deferred && tries < 1000; tries += 1) {
        await new Promise((r) => setTimeout(r, 5));
        answer = await host.lookup(prompt);
      }
      if (answer.deferred) throw new Error('still deferred');
      expect(answer.hitTokens).toBe(16);

      await host.reset();
      expect(rt.stats().tierUsed).toBe(0);
      const b = host.scheduler.open({
        requestId: 2,
        promptTokens: prompt,
        hitChunks: answer.hitChunks,
      });
      host.allocator.appendBlocks(b, 0, host.pool.allocate(5)!);
      // From the slots the reset retired: still the stored bytes.
      await expect(host.load(b, answer)).resolves.toEqual({
        ok: true,
        blocksLoaded: 4,
        mismatches: 0,
        loadedTokens: answer.hitTokens,
      });
      expect(rt.stats().tierUsed).toBe(0); // the load published nothing
      await runToEnd(b); // its cursor went back to 0: its chunks are stored again
      expect(rt.stats().tierUsed).toBe(4);
      expect((await rt.verify()).ok).toBe(true);
    } finally {
      await rt.close();
    }
    expect(rt.leakReport()).toMatchObject({
      pinsOutstanding: 0,
      tierEntriesWriting: 0,
      tierEntriesReading: 0,
    });
  }, 60_000);
});

describe('reset({ shared: true }) with a disk tier', () => {
  /** One engine instance in its own process on `dir` under `model`. */
  async function instance(dir: string, model: string) {
    const args = { tiers: { disk: { dir } }, model, requests: 2, promptTokens: 3000 };
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', 'test/fixtures/tier-runtime-child.ts', JSON.stringify(args)],
      { timeout: 120_000 },
    );
    return JSON.parse(stdout.trim().split('\n').at(-1)!) as {
      mismatches: number;
      tiers: Record<'disk', Record<string, number>>;
    };
  }

  it("retires the namespace's entries for every later instance; another namespace keeps its own", async () => {
    const dir = freshDir();
    expect((await instance(dir, 'a')).tiers.disk.storedChunks).toBeGreaterThan(0);
    expect((await instance(dir, 'c')).tiers.disk.storedChunks).toBeGreaterThan(0);
    // An instance of model a resets for everyone.
    const rt = await OffloadRuntime.start({
      config: { ...CONFIG, namespace: { model: 'a' } },
      tiers: { disk: { dir } },
    });
    await rt.reset({ shared: true });
    await rt.close();
    const a = await instance(dir, 'a');
    expect(a.tiers.disk.hitChunks).toBe(0);
    const c = await instance(dir, 'c');
    expect(c.tiers.disk.hitChunks).toBeGreaterThan(0);
    expect(a.mismatches + c.mismatches).toBe(0);
  }, 240_000);

  it('an instance still running with the entries indexed serves none of them after another one reset', async () => {
    const dir = freshDir();
    const scope = 0xabcn;
    const payload = Buffer.alloc(64, 7);
    const open = (s: bigint) =>
      DiskTier.open({ dir, bytesMax: 1 << 24, payloadBytes: 64, scope: s });
    const writer = await open(scope);
    const resetter = await open(scope);
    const other = await open(0xdefn);
    for (const k of [1n, 2n]) {
      writer.store(k, encodeValue(scope, k, payload));
      other.store(k, encodeValue(0xdefn, k, payload));
    }
    // Written, not a fixed 200 ms: stores are asynchronous file writes.
    await settle(writer);
    await settle(other);
    expect(await writer.states([1n, 2n])).toEqual(['hit', 'hit']);
    await resetter.retire();
    // The writer reads the epoch before each resolution (the cascade does it): its own entries are retired.
    await writer.refreshEpoch();
    expect(writer.epoch).toBe(resetter.epoch);
    expect(await writer.states([1n])).toEqual(['miss']);
    expect(await writer.load(2n)).toBeUndefined();
    expect(writer.counters.retiredChunks).toBe(2);
    // New entries carry the new epoch and are served again.
    writer.store(3n, encodeValue(scope, 3n, Buffer.alloc(64, 9), writer.epoch));
    await settle(writer);
    expect(await writer.load(3n)).toEqual(Buffer.alloc(64, 9));
    // Another scope on the same directory is untouched.
    await other.refreshEpoch();
    expect(await other.load(1n)).toEqual(payload);
    for (const t of [writer, resetter, other]) await t.close(1000);
  }, 60_000);

  it('a level that cannot take its new epoch rejects with SharedResetFailedError; the host tier is reset', async () => {
    const rt = await OffloadRuntime.start({
      config: CONFIG,
      // Unreachable from the start: run degraded (optional) so the reset is what fails.
      tiers: {
        redis: { urls: ['redis://127.0.0.1:1'], timeoutMs: 200, insecure: true },
        optional: true,
      },
      simulator: { seed: 5 },
    });
    await rt.submit(PROMPT);
    expect(rt.stats().tierUsed).toBeGreaterThan(0);
    const err = await rt.reset({ shared: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SharedResetFailedError);
    expect((err as SharedResetFailedError).tier).toBe('redis');
    expect(rt.stats().tierUsed).toBe(0);
    await rt.close();
  }, 120_000);
});
