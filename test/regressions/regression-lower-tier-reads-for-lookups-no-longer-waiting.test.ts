// Issue 25, failure 7 (waste), what was left of it: under load a warm restart
// from Redis read more chunks than it loaded (286 for 122). A resolution of the
// lower levels went on reading after nobody waited for it any more: its
// request aborted while it waited to ask again, or an external host that asks
// again under a new tag started a second resolution that read every chunk the
// first was reading. Now a request that ends tells the store, whose resolution
// then reads nothing more, and a key being read is read once.
//
// Both against a real cluster whose masters are paused (CLIENT PAUSE) while
// the lookup waits, so that the order is fixed: the lookup asks, the request
// ends or asks again, then the cluster answers. The reads are counted by the
// masters themselves (MONITOR).
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { TiersOptions } from '../../src/tier/cascade.js';
import { redisCli, useCluster, watchCommands } from '../helpers/redis-cluster.js';

const theCluster = useCluster({ replicas: 0 });
const SECRET = 'tier-secret-for-tests-0123456789';
/** Long enough for the request to end (or ask again) while the lookup waits; under the 2 s command deadline. */
const PAUSE_MS = 1_200;

const CONFIG = {
  ...DEFAULT_RUNTIME_CONFIG,
  groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
  blocksPerChunk: 4,
  namespace: { model: 'reads-no-longer-waited-for' },
};
const TOKENS_PER_CHUNK = 64;

function prompt(seed: number, length: number): number[] {
  return Array.from({ length }, (_, i) => (i * 7919 + seed * 104_729) % 30_000);
}

function tiers(): TiersOptions {
  return { redis: { urls: [theCluster().url] }, secret: SECRET };
}

const started: OffloadRuntime[] = [];
afterEach(async () => {
  for (const rt of started.splice(0)) await rt.close().catch(() => undefined);
});

async function start(extra: Partial<Parameters<typeof OffloadRuntime.start>[0]> = {}) {
  const rt = await OffloadRuntime.start({ config: CONFIG, tiers: tiers(), ...extra });
  started.push(rt);
  return rt;
}

/** Stores `tokens`' chunks in the cluster through a runtime of its own, closed after. */
async function storeInCluster(tokens: number[]): Promise<number> {
  const rt = await start();
  await rt.submit({ promptTokens: tokens, maxDecodeTokens: 2 });
  await rt.close();
  return rt.stats().tiers.redis.storedChunks;
}

async function masters(): Promise<number[]> {
  const out: number[] = [];
  for (const port of theCluster().ports) {
    if ((await redisCli(port, 'role')).startsWith('master')) out.push(port);
  }
  return out;
}

async function pause(ports: readonly number[]): Promise<void> {
  await Promise.all(ports.map((p) => redisCli(p, 'client', 'pause', String(PAUSE_MS), 'all')));
}

/** GETs of chunk entries (not of the epoch record) among MONITOR's lines. */
function entryGets(lines: readonly string[]): number {
  return lines.filter((l) => /\] "get" "kvoff:[^"]*"/i.test(l) && !/:epoch"/.test(l)).length;
}

async function until(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 3_000; i += 1) {
    if (done()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('lower-tier reads for lookups no longer waiting', () => {
  it('a request aborted while its lookup waits for a paused cluster reads none of its chunks', async () => {
    const warm = prompt(1, 40 * TOKENS_PER_CHUNK);
    expect(await storeInCluster(warm)).toBeGreaterThanOrEqual(40);
    // Every step aborts one queued request: the warm one, once it was told to ask again.
    const rt = await start({ simulator: { abortQueuedRate: 1, abortRunningRate: 0 } });
    // A request no tier holds runs (and steps) while the warm one waits.
    const runner = rt.submit({ promptTokens: prompt(2, 256), maxDecodeTokens: 2_000 });
    await until(() => rt.stats().chunksStored > 0, 'the running request to store');
    const ports = await masters();
    const watch = await watchCommands(ports);
    await pause(ports);
    const pausedAtMs = performance.now();
    const aborted = await rt.submit({ promptTokens: warm, maxDecodeTokens: 2 });
    expect(aborted.status).toBe('aborted');
    expect(rt.stats().lookupsRetried).toBeGreaterThan(0);
    // The cluster answers the lookup's EXISTS once the pause ends; without the
    // abort reaching the store, its GETs followed within milliseconds.
    await new Promise((r) =>
      setTimeout(r, Math.max(0, PAUSE_MS - (performance.now() - pausedAtMs)) + 500),
    );
    const lines = await watch.stop();
    expect(lines.some((l) => /"exists"/i.test(l))).toBe(true);
    expect(entryGets(lines)).toBe(0);
    expect(rt.stats().tiers.redis.hitChunks).toBe(0);
    await rt.close();
    expect((await runner).status).toBe('aborted');
  }, 120_000);

  it('an external host asking again while the cluster is paused reads each chunk once, and only what its hit loads', async () => {
    const warm = prompt(3, 40 * TOKENS_PER_CHUNK);
    expect(await storeInCluster(warm)).toBeGreaterThanOrEqual(40);
    const rt = await start({ external: true });
    const ports = await masters();
    const watch = await watchCommands(ports);
    await pause(ports);
    // Each call is a new lookup (a new tag): every one of them starts a resolution.
    let asks = 0;
    let answer = await rt.external!.lookup(warm);
    while (answer.deferred) {
      asks += 1;
      await new Promise((r) => setTimeout(r, 50));
      answer = await rt.external!.lookup(warm);
    }
    const lines = await watch.stop();
    expect(asks).toBeGreaterThan(2);
    const hitChunks = answer.hitTokens / TOKENS_PER_CHUNK;
    expect(hitChunks).toBeGreaterThanOrEqual(39);
    // Full attention: the decision reads exactly the hit's chunks.
    expect(entryGets(lines)).toBe(hitChunks);
    expect(rt.stats().tiers.redis.hitChunks).toBe(hitChunks);
  }, 120_000);
});
