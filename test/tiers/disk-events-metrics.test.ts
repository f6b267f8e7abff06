// A runtime with a small host tier over a small disk tier, a prompt repeated
// after the host evicted it: the disk level's stores and evictions are
// announced as KV events (medium DISK, each key after its host store), a
// promotion back into host memory is announced, and vLLM's offloading metrics
// (lookup delays, bytes and seconds per tier, usage, pending stores, stores
// skipped by reason, hit tokens per tier, events) are on /metrics with the
// values stats() gives.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { createMetrics } from '../../src/serve/metrics.js';
import type { BlockStored, KvEventBatch } from '../../src/events/types.js';
import { VALUE_HEADER_BYTES } from '../../src/tier/value.js';
import { ONE_GROUP } from '../helpers/configs.js';
import { settle } from '../helpers/runtime.js';

function metric(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  expect(line, `${name}${labels} on /metrics`).toBeDefined();
  return Number(line!.split(' ')[1]);
}

describe('KV events and offloading metrics with a disk tier', () => {
  it('announces disk stores, disk evictions and promotions, and exports the metrics stats() counts', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvoff-disk-events-'));
    const bytesPerBlock = 256;
    const valueBytes = VALUE_HEADER_BYTES + bytesPerBlock;
    const rt = await OffloadRuntime.start({
      config: { ...ONE_GROUP, tierChunks: 20, bytesPerBlock, namespace: { model: 'disk-events' } },
      tiers: { disk: { dir, bytesMax: 40 * valueBytes, freeBytesMin: 0 } },
      events: {},
    });
    try {
      const metrics = createMetrics(rt, {
        eventLoopDelayMs: () => ({ p50: 0, p99: 0, max: 0 }),
        http: () => ({
          inFlight: 0,
          served: 0,
          clientErrors: 0,
          serverErrors: 0,
          clientDisconnects: 0,
        }),
      });
      const stream = rt.events();
      const seen: KvEventBatch[] = [];
      const reading = (async () => {
        for await (const b of stream) seen.push(b);
      })();
      const prompt = (p: number) =>
        Array.from({ length: 48 }, (_, i) => 1 + ((p * 7919 + i * 31) % 30_000));
      // 8 prompts of 12 chunks through a host tier of 20 and a disk of 40: both evict.
      for (let p = 0; p < 8; p += 1)
        await rt.submit({ promptTokens: prompt(p), maxDecodeTokens: 2 });
      await settle(rt);
      // Prompt 6 left host memory but is on disk: its lookup promotes it.
      const again = await rt.submit({ promptTokens: prompt(6), maxDecodeTokens: 2 });
      expect(again.hitChunks).toBeGreaterThan(0);
      await settle(rt);
      const s = rt.stats();
      const text = await metrics.render();

      const events = seen.flatMap((b) => b.events);
      const announced = { CPU: new Set<bigint>(), DISK: new Set<bigint>() };
      let diskStored = 0;
      let diskRemoved = 0;
      let promoted = 0;
      for (const e of events) {
        if (e.type === 'BlockStored' && e.medium === 'DISK') {
          for (const k of e.blockHashes) {
            expect(announced.CPU.has(k), 'a disk store follows its host store').toBe(true);
            announced.DISK.add(k);
            diskStored += 1;
          }
        } else if (e.type === 'BlockStored' && e.medium === 'CPU') {
          for (const k of e.blockHashes) announced.CPU.add(k);
          if (e.tokenIds.length === 0) promoted += e.blockHashes.length;
        } else if (e.type === 'BlockRemoved' && e.medium === 'DISK') {
          for (const k of e.blockHashes) {
            expect(announced.DISK.delete(k), 'a disk removal follows its disk store').toBe(true);
            diskRemoved += 1;
          }
        }
      }
      expect(diskStored).toBe(s.tiers.disk.storedChunks);
      expect(diskRemoved).toBe(s.tiers.disk.evictions);
      expect(diskRemoved).toBeGreaterThan(0);
      expect(announced.DISK.size).toBe(s.tiers.disk.entries);
      expect(promoted).toBeGreaterThan(0);
      const promotion = events.find(
        (e): e is BlockStored =>
          e.type === 'BlockStored' && e.medium === 'CPU' && e.tokenIds.length === 0,
      )!;
      expect(promotion).toMatchObject({ blockSize: 0, groupIdx: 0 });

      // Lookup delays: one sync sample per lookup call.
      expect(s.lookupCalls).toBeGreaterThan(0);
      expect(metric(text, 'kvoff_lookup_sync_seconds_count')).toBe(s.lookupCalls);
      expect(metric(text, 'kvoff_lookup_sync_seconds_sum')).toBeCloseTo(s.lookupCallSeconds, 5);
      expect(metric(text, 'kvoff_lookup_deferred_seconds_count')).toBe(s.lookupsResolvedAfterDefer);
      // Bytes and seconds per tier.
      for (const tier of ['host', 'disk'] as const) {
        expect(metric(text, 'kvoff_tiers_bytes_written_total', `{tier="${tier}"}`)).toBe(
          s.tiers[tier].bytesWritten,
        );
        expect(metric(text, 'kvoff_tiers_store_seconds_total', `{tier="${tier}"}`)).toBeGreaterThan(
          0,
        );
      }
      expect(metric(text, 'kvoff_tiers_load_seconds_total', '{tier="disk"}')).toBeGreaterThan(0);
      // Usage.
      expect(metric(text, 'kvoff_tiers_entries', '{tier="host"}')).toBe(s.tierUsed);
      expect(metric(text, 'kvoff_tiers_bytes_used', '{tier="disk"}')).toBe(
        s.tiers.disk.entries * valueBytes,
      );
      expect(metric(text, 'kvoff_tiers_usage_ratio', '{tier="disk"}')).toBeCloseTo(
        s.tiers.disk.entries / 40,
        6,
      );
      expect(metric(text, 'kvoff_tiers_stores_pending', '{tier="host"}')).toBe(0);
      // Hit tokens: the repeat's hit came from disk, 4 tokens a chunk.
      expect(metric(text, 'kvoff_tiers_hit_tokens_total', '{tier="disk"}')).toBe(
        s.tiers.disk.hitTokens,
      );
      expect(s.tiers.disk.hitTokens).toBe(promoted * 4);
      // Stores skipped by reason, and the events.
      expect(metric(text, 'kvoff_stores_skipped_total', '{tier="host",reason="threshold"}')).toBe(
        0,
      );
      metric(text, 'kvoff_stores_skipped_total', '{tier="host",reason="capacity"}');
      metric(text, 'kvoff_stores_skipped_total', '{tier="disk",reason="full"}');
      expect(metric(text, 'kvoff_events_published_total')).toBe(s.events!.published);
      expect(metric(text, 'kvoff_events_dropped_total')).toBe(0);
      await rt.close();
      await reading;
    } finally {
      await rt.close().catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
  });
});
