// KV events from the threaded runtime through runtime.events(): every chunk
// the host tier stores is announced once, with its offload key, its parent's
// key and its tokens; every chunk it evicts is announced removed after it was
// announced stored; and what was announced and not removed is exactly what the
// tier holds at the end.
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import { keyWord } from '../../src/identity.js';
import { promptKeys } from '../../src/hashing.js';
import { resolveConfig } from '../../src/config.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { BlockStored, KvEventBatch } from '../../src/events/types.js';
import { Prng } from '../../src/prng.js';
import { ONE_GROUP, SMALL_HYBRID } from '../helpers/configs.js';
import { settle } from '../helpers/runtime.js';
import { runNode } from '../helpers/cli.js';

async function collect(stream: AsyncIterable<KvEventBatch>): Promise<KvEventBatch[]> {
  const out: KvEventBatch[] = [];
  for await (const b of stream) out.push(b);
  return out;
}

function prompts(n: number, length: number, seed: number): number[][] {
  const random = new Prng(seed);
  return Array.from({ length: n }, () => Array.from({ length }, () => 1 + random.int(30_000)));
}

/** (group, key) -> the chunk it names: its prompt, its index, its parent's key. */
async function chunkIndex(config: ReturnType<typeof resolveConfig>, all: number[][]) {
  const hashing = await loadHashing();
  const index = new Map<string, { prompt: number; chunk: number; parent: bigint | null }>();
  all.forEach((tokens, p) => {
    // Events carry key words, the 64 bits a tier names a chunk by.
    promptKeys(config, hashing, tokens).forEach((identities, g) => {
      const keys = identities.map(keyWord);
      keys.forEach((k, c) =>
        index.set(`${g}:${k}`, { prompt: p, chunk: c, parent: c > 0 ? keys[c - 1]! : null }),
      );
    });
  });
  return index;
}

describe('KV events: runtime.events()', () => {
  it('announces every stored chunk with its key, parent and tokens, and every eviction after its store', async () => {
    // 12 prompts of 16 chunks against a host tier of 48: later stores evict earlier chunks.
    const input = { ...ONE_GROUP, tierChunks: 48 };
    const config = resolveConfig(input);
    const all = prompts(12, 64, 5);
    const rt = await OffloadRuntime.start({ config: input, events: {} });
    const batches = collect(rt.events());
    for (const promptTokens of all) await rt.submit({ promptTokens, maxDecodeTokens: 2 });
    await settle(rt);
    const before = rt.stats();
    await rt.close();
    const received = await batches;
    const index = await chunkIndex(config, all);
    const tpc = config.groups[0]!.tokensPerChunk;

    // Sequence numbers count up from 0 with no gap: nothing was dropped on the way.
    expect(received.map((b) => b.seq)).toEqual(received.map((_, i) => i));
    const resident = new Set<bigint>();
    let stored = 0;
    let removed = 0;
    for (const batch of received) {
      expect(batch.dataParallelRank).toBe(0);
      for (const e of batch.events) {
        if (e.type === 'BlockStored') {
          expect(e.medium).toBe('CPU');
          expect(e.groupIdx).toBe(0);
          expect(e.kvCacheSpecKind).toBe('full_attention');
          expect(e.blockSize).toBe(tpc);
          expect(e.tokenIds).toHaveLength(e.blockHashes.length * tpc);
          e.blockHashes.forEach((key, i) => {
            const at = index.get(`0:${key}`);
            expect(at, `stored key ${key} names a chunk of a submitted prompt`).toBeDefined();
            expect(e.tokenIds.slice(i * tpc, (i + 1) * tpc)).toEqual(
              all[at!.prompt]!.slice(at!.chunk * tpc, (at!.chunk + 1) * tpc),
            );
            // The first chunk's parent is the event's; each later one's is the chunk before it.
            expect(i === 0 ? e.parentBlockHash : e.blockHashes[i - 1]).toBe(at!.parent);
            expect(resident.has(key)).toBe(false);
            resident.add(key);
            stored += 1;
          });
        } else if (e.type === 'BlockRemoved') {
          expect(e.medium).toBe('CPU');
          for (const key of e.blockHashes) {
            expect(resident.delete(key), `removed key ${key} was announced stored`).toBe(true);
            removed += 1;
          }
        }
      }
    }
    const after = rt.stats();
    expect(after.events!.dropped).toBe(0);
    expect(stored).toBe(before.tiers.host.storedChunks);
    expect(removed).toBe(before.tiers.host.evictions);
    expect(removed).toBeGreaterThan(0);
    expect(resident.size).toBe(before.tierUsed);
    expect(after.events!.published).toBe(received.reduce((n, b) => n + b.events.length, 0));
    expect(after.events!.batches).toBe(received.length);
  });

  it('a reset publishes AllBlocksCleared after the stores before it, and stores after it are announced again', async () => {
    const input = { ...ONE_GROUP, tierChunks: 48 };
    const [first, second] = prompts(2, 64, 9);
    const rt = await OffloadRuntime.start({ config: input, events: {} });
    const batches = collect(rt.events());
    await rt.submit({ promptTokens: first!, maxDecodeTokens: 2 });
    await settle(rt);
    await rt.reset();
    // The same prompt misses after the reset and is stored (and announced) again.
    await rt.submit({ promptTokens: first!, maxDecodeTokens: 2 });
    await rt.submit({ promptTokens: second!, maxDecodeTokens: 2 });
    await settle(rt);
    await rt.close();
    const events = (await batches).flatMap((b) => b.events);
    const at = events.findIndex((e) => e.type === 'AllBlocksCleared');
    expect(at, 'AllBlocksCleared among the events').toBeGreaterThan(0);
    expect(events.filter((e) => e.type === 'AllBlocksCleared')).toHaveLength(1);
    const storedBefore = events.slice(0, at).filter((e) => e.type === 'BlockStored');
    const storedAfter = events.slice(at + 1).filter((e) => e.type === 'BlockStored');
    expect(storedBefore.length).toBeGreaterThan(0);
    const hashesBefore = new Set(storedBefore.flatMap((e) => e.blockHashes));
    // The first prompt's chunks are announced again after the reset.
    const again = storedAfter.flatMap((e) => e.blockHashes).filter((k) => hashesBefore.has(k));
    expect(again.length).toBe(hashesBefore.size);
  });

  it('names each chunk of a hybrid model by its group, with the sliding window of that group', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID, events: {} });
    const batches = collect(rt.events());
    await rt.submit({ promptLength: 400, prefixId: 1, maxDecodeTokens: 4 });
    await settle(rt);
    await rt.close();
    const stored = (await batches)
      .flatMap((b) => b.events)
      .filter((e): e is BlockStored => e.type === 'BlockStored');
    const kinds = new Map(
      stored.map((e) => [e.groupIdx, [e.kvCacheSpecKind, e.kvCacheSpecSlidingWindow]]),
    );
    expect(kinds.get(0)).toEqual(['full_attention', null]);
    expect(kinds.get(1)).toEqual(['sliding_window', 32]);
  });

  it('refuses events() without events in the start options, and bad events options before any worker starts', async () => {
    await expect(
      OffloadRuntime.start({ config: ONE_GROUP, events: { endpoint: 'http://x' } }),
    ).rejects.toThrow(/events.endpoint/);
    await expect(
      OffloadRuntime.start({ config: ONE_GROUP, events: { bufferSteps: 0 } }),
    ).rejects.toThrow(/events.bufferSteps/);
    const rt = await OffloadRuntime.start({ config: ONE_GROUP });
    try {
      expect(() => rt.events()).toThrow(/start the runtime with events/);
      expect(rt.stats().events).toBeUndefined();
    } finally {
      await rt.close();
    }
  });
});

describe('KV events: zeromq is loaded only where events go over ZeroMQ', () => {
  it.each([
    ['off', false],
    ['stream', false],
    ['zmq', true],
  ] as const)('events %s: native addon loaded %s', async (mode, loaded) => {
    const run = await runNode(['--import', 'tsx', 'test/fixtures/events-native-load.ts', mode]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ mode, native: loaded });
  });
});

describe('KV events: an idle runtime with ZeroMQ sockets', () => {
  it('does not hold the process (the replay socket is polled, never awaited)', async () => {
    const run = await runNode(['--import', 'tsx', 'test/fixtures/events-idle-endpoint.ts'], {
      timeoutMs: 60_000,
    });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('idle\n');
    expect(run.code).toBe(0);
  });
});

describe('KV events: zeromq missing', () => {
  it('start() rejects with EventsUnavailableError naming the package, before any worker runs', async () => {
    const run = await runNode([
      ...['--import', 'tsx', '--import', './test/fixtures/no-zeromq.mjs'],
      'test/fixtures/events-without-zeromq.ts',
    ]);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      name: 'EventsUnavailableError',
      code: 'KVOFF_EVENTS_UNAVAILABLE',
      packageName: 'zeromq',
      message: expect.stringContaining('KV events over ZeroMQ need the zeromq package') as string,
    });
  });
});
