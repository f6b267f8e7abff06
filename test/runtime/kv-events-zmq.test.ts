// KV events over ZeroMQ, checked by a subscriber kvoff did not write: Python
// on Debian's python3-zmq and python3-msgpack (test/fixtures/
// kv_events_subscriber.py, after vLLM's example), decoding by vLLM's schema.
// What it decodes must be, batch for batch, what runtime.events() saw; a
// sequence gap (batches before it subscribed, a batch it drops on purpose) is
// filled from kvoff's replay socket.
import { describe, expect, it } from 'vitest';
import { Dealer } from 'zeromq';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { KvEvent, KvEventBatch } from '../../src/events/types.js';
import { ONE_GROUP } from '../helpers/configs.js';
import { settle } from '../helpers/runtime.js';
import { PythonSubscriber } from '../helpers/python-subscriber.js';
import type { DecodedBatch } from '../helpers/python-subscriber.js';

/** An event as the subscriber prints it: vLLM's field names, defaults filled, hashes as strings. */
function asDecoded(e: KvEvent): Record<string, unknown> {
  if (e.type === 'AllBlocksCleared') return { type: e.type };
  const hashes = e.blockHashes.map(String);
  if (e.type === 'BlockRemoved') {
    return { type: e.type, block_hashes: hashes, medium: e.medium, group_idx: e.groupIdx };
  }
  return {
    type: e.type,
    block_hashes: hashes,
    parent_block_hash: e.parentBlockHash === null ? null : String(e.parentBlockHash),
    token_ids: e.tokenIds,
    block_size: e.blockSize,
    lora_id: null,
    medium: e.medium,
    lora_name: null,
    extra_keys: null,
    group_idx: e.groupIdx,
    kv_cache_spec_kind: e.kvCacheSpecKind,
    kv_cache_spec_sliding_window: e.kvCacheSpecSlidingWindow,
  };
}

function truth(batches: readonly KvEventBatch[]) {
  return batches.map((b) => ({ seq: b.seq, events: b.events.map(asDecoded), rank: 0 }));
}

function decoded(batches: readonly DecodedBatch[]) {
  return batches.map((b) => ({ seq: b.seq, events: b.events, rank: b.data_parallel_rank }));
}

let promptsMade = 0;

/** `prompts` requests, each a prompt no earlier one shared (so each stores new chunks). */
async function run(rt: OffloadRuntime, prompts: number): Promise<void> {
  for (let n = 0; n < prompts; n += 1) {
    const p = promptsMade++;
    const promptTokens = Array.from({ length: 48 }, (_, i) => 1 + ((p * 7919 + i * 31) % 30_000));
    await rt.submit({ promptTokens, maxDecodeTokens: 2 });
  }
  await settle(rt);
}

describe('KV events over ZeroMQ, decoded by a Python subscriber', () => {
  it('array wire, kvoff connecting to a bound subscriber: every batch decoded, a dropped one replayed', async () => {
    const sub = await PythonSubscriber.start([
      ...['--sub', 'tcp://127.0.0.1:*', '--bind', '--topic', 'kv-events'],
      ...['--from-start', '--drop', '2'],
    ]);
    const rt = await OffloadRuntime.start({
      config: { ...ONE_GROUP, tierChunks: 24 },
      events: { endpoint: sub.endpoint, replayEndpoint: 'tcp://127.0.0.1:*', topic: 'kv-events' },
    });
    try {
      const replay = rt.eventEndpoints!.replayEndpoint!;
      expect(replay).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      sub.send(`replay ${replay}`);
      const stream = rt.events();
      const seen: KvEventBatch[] = [];
      const reading = (async () => {
        for await (const b of stream) seen.push(b);
      })();
      await run(rt, 6);
      const last = seen[seen.length - 1]!.seq;
      await sub.until((got) => got.some((b) => b.seq === last));
      expect(decoded(sub.batches)).toEqual(truth(seen));
      // Seq 2 was dropped on purpose and came back through the replay socket.
      expect(sub.batches.find((b) => b.seq === 2)?.via).toBe('replay');
      expect(sub.batches.filter((b) => b.via === 'live').length).toBeGreaterThan(0);
      expect(sub.batches.every((b) => typeof b.ts === 'number' && b.ts > 1.7e9)).toBe(true);
      const kinds = new Set(sub.batches.flatMap((b) => b.events.map((e) => e['type'])));
      expect(kinds).toEqual(new Set(['BlockStored', 'BlockRemoved']));
      await rt.close();
      await reading;
      expect(rt.stats().events!.replays).toBeGreaterThan(0);
    } finally {
      await rt.close().catch(() => undefined);
      const { code, stderr } = await sub.stop();
      expect(stderr).toBe('');
      expect(code).toBe(0);
    }
  });

  it('map wire, kvoff binding: a subscriber that joins late replays from seq 0 with the topic frame', async () => {
    const rt = await OffloadRuntime.start({
      config: ONE_GROUP,
      events: {
        endpoint: 'tcp://127.0.0.1:*',
        replayEndpoint: 'tcp://127.0.0.1:*',
        topic: 'kv@instance-1',
        wire: 'map',
      },
    });
    let sub: PythonSubscriber | undefined;
    try {
      const stream = rt.events();
      const seen: KvEventBatch[] = [];
      const reading = (async () => {
        for await (const b of stream) seen.push(b);
      })();
      await run(rt, 2);
      expect(seen.length).toBeGreaterThan(0);
      const { endpoint, replayEndpoint } = rt.eventEndpoints!;
      sub = await PythonSubscriber.start([
        ...['--sub', endpoint, '--replay', replayEndpoint!, '--topic', 'kv@instance-1'],
        ...['--wire', 'map', '--from-start'],
      ]);
      // A PUB socket sends only once the subscription arrived: keep publishing until one is seen live.
      for (let i = 0; i < 40 && !sub.batches.some((b) => b.via === 'live'); i += 1)
        await run(rt, 1);
      const last = seen[seen.length - 1]!.seq;
      await sub.until((got) => got.some((b) => b.seq === last));
      expect(decoded(sub.batches)).toEqual(truth(seen));
      expect(sub.batches[0]).toMatchObject({ seq: 0, via: 'replay' });
      await rt.close();
      await reading;
    } finally {
      await rt.close().catch(() => undefined);
      const stopped = await sub?.stop();
      expect(stopped?.stderr).toBe('');
      expect(stopped?.code).toBe(0);
    }
  });

  it('replays from a bounded buffer: the last bufferSteps batches from the asked seq on, then the end marker', async () => {
    const rt = await OffloadRuntime.start({
      config: ONE_GROUP,
      events: {
        endpoint: 'tcp://127.0.0.1:*',
        replayEndpoint: 'tcp://127.0.0.1:*',
        bufferSteps: 2,
      },
    });
    const dealer = new Dealer({ linger: 0, receiveTimeout: 10_000 });
    try {
      const seen: KvEventBatch[] = [];
      const stream = rt.events();
      const reading = (async () => {
        for await (const b of stream) seen.push(b);
      })();
      // More batches than the buffer keeps (each new prompt stores new chunks).
      for (let i = 0; i < 40 && seen.length < 4; i += 1) await run(rt, 1);
      expect(seen.length).toBeGreaterThanOrEqual(4);
      dealer.connect(rt.eventEndpoints!.replayEndpoint!);
      const start = Buffer.alloc(8);
      start.writeBigUInt64BE(0n);
      await dealer.send([Buffer.alloc(0), start]);
      const seqs: bigint[] = [];
      for (;;) {
        const [, seq, payload] = await dealer.receive();
        if (seq!.equals(Buffer.alloc(8, 0xff))) {
          expect(payload!.length).toBe(0);
          break;
        }
        seqs.push(seq!.readBigUInt64BE(0));
      }
      const n = BigInt(seen.length);
      expect(seqs).toEqual([n - 2n, n - 1n]);
      await rt.close();
      await reading;
    } finally {
      dealer.close();
      await rt.close().catch(() => undefined);
    }
  });
});
