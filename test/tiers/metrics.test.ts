// /metrics for the tiers: per-level counters labelled by tier (fed as deltas
// of the stats snapshot), the circuit gauge, and a store-latency histogram per
// tier (host from job events, lower levels from their per-chunk samples).
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/serve/metrics.js';
import type {
  EmbeddableRuntime,
  JobEvent,
  RuntimeStats,
  TierStoreSample,
} from '../../src/serve/runtime-api.js';
import { zeroCounters } from '../../src/tier/lower.js';

function standIn() {
  const tiers = { host: zeroCounters(), disk: zeroCounters(), redis: zeroCounters() };
  const jobs: ((e: JobEvent) => void)[] = [];
  const samples: ((e: TierStoreSample) => void)[] = [];
  const runtime = {
    config: { maxTokensPerRequest: 100 },
    submit: () => Promise.reject(new Error('unused')),
    // Every other counter reads 0.
    stats: () =>
      new Proxy({ tiers } as Partial<RuntimeStats>, {
        get: (t, k) => (k in t ? t[k as keyof RuntimeStats] : 0),
      }) as RuntimeStats,
    close: () => Promise.resolve(),
    on: (_e: 'job', fn: (e: JobEvent) => void) => jobs.push(fn),
    onTierStore: (fn: (e: TierStoreSample) => void) => samples.push(fn),
  } satisfies EmbeddableRuntime;
  return { runtime, tiers, jobs, samples };
}

describe('tier metrics', () => {
  it('exports per-tier counters, the circuit gauge and a store-latency histogram per tier', async () => {
    const s = standIn();
    const m = createMetrics(s.runtime, {
      eventLoopDelayMs: () => ({ p50: 0, p99: 0, max: 0 }),
      http: () => ({
        inFlight: 0,
        served: 0,
        clientErrors: 0,
        serverErrors: 0,
        clientDisconnects: 0,
      }),
    });
    s.tiers.disk.storedChunks = 5;
    s.tiers.redis.droppedChunks = 2;
    s.tiers.redis.circuitOpen = 1;
    for (const fn of s.jobs) fn({ jobId: 1, chunks: 1, bytes: 1, latencyMs: 0.3 });
    for (const fn of s.samples) fn({ tier: 'redis', latencyMs: 3 });
    let text = await m.render();
    expect(text).toContain('kvoff_tiers_stored_chunks_total{tier="disk"} 5');
    expect(text).toContain('kvoff_tiers_dropped_chunks_total{tier="redis"} 2');
    expect(text).toContain('kvoff_tiers_circuit_open{tier="redis"} 1');
    expect(text).toContain('kvoff_tiers_circuit_open{tier="disk"} 0');
    expect(text).toContain('kvoff_tier_store_latency_seconds_count{tier="host"} 1');
    expect(text).toContain('kvoff_tier_store_latency_seconds_bucket{le="0.005",tier="redis"} 1');
    // Counters move by the difference between snapshots.
    s.tiers.disk.storedChunks = 8;
    text = await m.render();
    expect(text).toContain('kvoff_tiers_stored_chunks_total{tier="disk"} 8');
  });
});
