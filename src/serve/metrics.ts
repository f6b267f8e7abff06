// Prometheus metrics of an embedded runtime, exposed with prom-client on a
// registry of our own (never the process-global one, so two servers in one
// process do not collide). Counters and gauges are read from one stats()
// snapshot at scrape time; job latency is observed from the runtime's 'job'
// events as they happen.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EmbeddableRuntime, RuntimeStats } from './runtime-api.js';
import { TIER_COUNTER_FIELDS, TIER_GAUGE_FIELDS, TIER_NAMES } from '../tier/lower.js';
import type { TierCounterField } from '../tier/lower.js';
import type { WorkerMemory } from '../runtime/memory.js';

/** Monotonic runtime counters exported as Prometheus counters. */
const COUNTERS = [
  ['requests', 'kvoff_requests_admitted_total', 'requests admitted by the engine'],
  ['completed', 'kvoff_requests_completed_total', 'requests that finished normally'],
  ['aborted', 'kvoff_requests_aborted_total', 'requests aborted'],
  ['preemptions', 'kvoff_preemptions_total', 'preemptions with recompute'],
  ['chunksStored', 'kvoff_chunks_stored_total', 'chunks dispatched to the transfer backend'],
  [
    'chunksDeferred',
    'kvoff_chunks_deferred_total',
    'chunk-visits where a token-ready chunk was not ready yet',
  ],
  [
    'chunksSkippedUnready',
    'kvoff_chunks_skipped_unready_total',
    'token-ready chunks the cursor passed unstored (a legacy policy; 0 under ready-prefix)',
  ],
  [
    'chunksDeferredThenStored',
    'kvoff_chunks_deferred_then_stored_total',
    'stored chunks that had been deferred before',
  ],
  [
    'allocationRetries',
    'kvoff_tier_allocation_retries_total',
    'store offers the tier could not allocate (retried on a later pass)',
  ],
  ['snapshotRetries', 'kvoff_snapshot_retries_total', 'seqlock snapshots the store role retried'],
  ['tierHits', 'kvoff_tier_hit_chunks_total', 'chunks loaded from the tier on prefix reuse'],
  ['bytesCopied', 'kvoff_bytes_copied_total', 'bytes copied by completed store jobs'],
  [
    'chunksDroppedForCapacity',
    'kvoff_chunks_dropped_for_capacity_total',
    'final chunks the tier could not take after retries',
  ],
  [
    'chunksUnreachable',
    'kvoff_chunks_unreachable_total',
    'sliding-window chunks not copied: no hit aligned to the full-attention chunk can use them',
  ],
  [
    'chunksDroppedUnready',
    'kvoff_chunks_dropped_unready_total',
    'token-ready chunks of ended requests whose keys or block IDs never came',
  ],
  [
    'holes',
    'kvoff_holes_total',
    'token-ready chunks of ended requests neither stored nor counted (must stay 0)',
  ],
  ['mismatches', 'kvoff_mismatches_total', 'tier bytes that did not match their key (must stay 0)'],
  [
    'jobsTransferFailed',
    'kvoff_jobs_transfer_failed_total',
    'store jobs whose copy failed (each fails its own job; the runtime goes on)',
  ],
  [
    'chunksTransferFailed',
    'kvoff_chunks_transfer_failed_total',
    'chunks of store jobs whose copy failed: not stored, counted',
  ],
] as const satisfies readonly (readonly [keyof RuntimeStats, string, string])[];

/** Levels exported as Prometheus gauges. */
const GAUGES = [
  ['tierUsed', 'kvoff_tier_used_chunks', 'tier entries in use (readable or being written)'],
  ['tierCapacity', 'kvoff_tier_capacity_chunks', 'tier capacity in chunks'],
  ['pinsOutstanding', 'kvoff_pins_outstanding', 'GPU blocks pinned by store jobs not yet copied'],
  ['jobsInFlight', 'kvoff_jobs_in_flight', 'transfer jobs submitted and not completed'],
  [
    'jobsHeld',
    'kvoff_store_jobs_held',
    'store jobs the planner holds (dispatched, not completed): 0 at rest, else a leak',
  ],
] as const satisfies readonly (readonly [keyof RuntimeStats, string, string])[];

/** Job latency buckets in seconds: 0.1 ms to 1 s. */
const JOB_LATENCY_BUCKETS_S = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
];

/** The HTTP layer's counters, as /v1/stats reports them under `http`. */
interface HttpCounterSnapshot {
  inFlight: number;
  served: number;
  clientErrors: number;
  serverErrors: number;
  clientDisconnects: number;
}

export interface ServerGauges {
  /** Event-loop delay percentiles of the serving thread, in milliseconds. */
  eventLoopDelayMs(): { p50: number; p99: number; max: number };
  http(): HttpCounterSnapshot;
}

/** HTTP counters exported as Prometheus counters, named after their /v1/stats field. */
const HTTP_COUNTERS = [
  ['served', 'kvoff_http_requests_served_total', 'POST /v1/requests answered 200'],
  [
    'clientErrors',
    'kvoff_http_client_errors_total',
    '4xx answers, malformed HTTP and clients gone before their body arrived',
  ],
  ['serverErrors', 'kvoff_http_server_errors_total', '5xx answers'],
  [
    'clientDisconnects',
    'kvoff_http_client_disconnects_total',
    'connections closed by the client before its answer was sent',
  ],
] as const satisfies readonly (readonly [keyof HttpCounterSnapshot, string, string])[];

export interface RuntimeMetrics {
  readonly registry: Registry;
  /** The exposition text, from one stats() snapshot. */
  render(): Promise<string>;
}

export function createMetrics(runtime: EmbeddableRuntime, server: ServerGauges): RuntimeMetrics {
  const registry = new Registry();
  // Counters are fed the difference since the last scrape of one snapshot.
  let snapshot: RuntimeStats | undefined;
  const exported: Partial<Record<keyof RuntimeStats, number>> = {};
  const take = (): RuntimeStats => (snapshot ??= runtime.stats());

  for (const [field, name, help] of COUNTERS) {
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const now = take()[field];
        if (typeof now !== 'number') return;
        const delta = now - (exported[field] ?? 0);
        if (delta > 0) this.inc(delta);
        exported[field] = Math.max(now, exported[field] ?? 0);
      },
    });
  }
  for (const [field, name, help] of GAUGES) {
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        // A runtime embedded through EmbeddableRuntime may lack a newer field: no sample then.
        const v = take()[field];
        if (typeof v === 'number') this.set(v);
      },
    });
  }
  const jobLatency = new Histogram({
    name: 'kvoff_job_latency_seconds',
    help: 'transfer job latency, from submission to completion',
    buckets: JOB_LATENCY_BUCKETS_S,
    registers: [registry],
  });
  runtime.on('job', (e) => jobLatency.observe(e.latencyMs / 1000));
  registerTierMetrics(registry, take, runtime);
  registerMemoryMetrics(registry, take);

  const loopDelay = new Gauge({
    name: 'kvoff_event_loop_delay_seconds',
    help: 'event-loop delay of the serving thread since start, by quantile',
    labelNames: ['quantile'],
    registers: [registry],
    collect() {
      const d = server.eventLoopDelayMs();
      this.set({ quantile: '0.5' }, d.p50 / 1000);
      this.set({ quantile: '0.99' }, d.p99 / 1000);
      this.set({ quantile: '1' }, d.max / 1000);
    },
  });
  void loopDelay;
  new Gauge({
    name: 'kvoff_http_requests_in_flight',
    help: 'POST /v1/requests accepted by the runtime and not yet answered',
    registers: [registry],
    collect() {
      this.set(server.http().inFlight);
    },
  });
  // These live in this process and only grow: set the counter to the total.
  for (const [field, name, help] of HTTP_COUNTERS) {
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(server.http()[field]);
      },
    });
  }

  return {
    registry,
    async render() {
      snapshot = undefined;
      try {
        return await registry.metrics();
      } finally {
        snapshot = undefined;
      }
    },
  };
}

/** Each worker's own heap and external memory (as it last sampled them), and the process's RSS. */
function registerMemoryMetrics(registry: Registry, take: () => RuntimeStats): void {
  const perWorker = (field: keyof WorkerMemory) =>
    function (this: Gauge<'role' | 'thread'>): void {
      // Roles that are not running (external mode, offload off) have no sample: no series.
      this.reset();
      // A runtime embedded through EmbeddableRuntime may report no memory at all.
      const m = take().memory as RuntimeStats['memory'] | undefined;
      if (typeof m !== 'object' || m === null) return;
      for (const role of ['main', 'scheduler', 'hasher', 'allocator', 'store'] as const) {
        const w = m[role];
        if (w !== undefined) this.set({ role, thread: '0' }, w[field]);
      }
      (m.transfer ?? []).forEach((w, i) =>
        this.set({ role: 'transfer', thread: String(i) }, w[field]),
      );
    };
  new Gauge({
    name: 'kvoff_worker_heap_used_bytes',
    help: 'V8 heap in use per worker thread, sampled by the worker itself (role, thread index)',
    labelNames: ['role', 'thread'],
    registers: [registry],
    collect: perWorker('heapUsedBytes'),
  });
  new Gauge({
    name: 'kvoff_worker_external_bytes',
    help: 'memory outside the V8 heap per worker thread (ArrayBuffers, shared ones included), sampled by the worker itself',
    labelNames: ['role', 'thread'],
    registers: [registry],
    collect: perWorker('externalBytes'),
  });
  new Gauge({
    name: 'kvoff_process_resident_bytes',
    help: 'resident memory of the whole process, every thread included',
    registers: [registry],
    collect() {
      const m = take().memory as RuntimeStats['memory'] | undefined;
      if (typeof m?.rssBytes === 'number') this.set(m.rssBytes);
    },
  });
}

/** Tier store latency buckets in seconds: 0.1 ms (host) to 5 s (a Redis timeout). */
const TIER_LATENCY_BUCKETS_S = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
];

/** storedChunks -> kvoff_tiers_stored_chunks_total{tier}; circuitOpen -> kvoff_tiers_circuit_open (a gauge). */
function tierMetricName(field: TierCounterField): string {
  const snake = field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  return TIER_GAUGE_FIELDS.includes(field) ? `kvoff_tiers_${snake}` : `kvoff_tiers_${snake}_total`;
}

const GAUGE_HELP: Partial<Record<TierCounterField, string>> = {
  circuitOpen: 'per tier: 1 while its circuit breaker is open',
  degraded:
    'per tier: 1 while it is not doing its job (not connected, circuit open, writes failing)',
};

/** Per-level counters labelled by tier, and a store-latency histogram per tier. */
function registerTierMetrics(
  registry: Registry,
  take: () => RuntimeStats,
  runtime: EmbeddableRuntime,
): void {
  const exported = new Map<string, number>();
  for (const field of TIER_COUNTER_FIELDS) {
    const name = tierMetricName(field);
    const help = `per tier (host, disk, redis): ${field}`;
    if (TIER_GAUGE_FIELDS.includes(field)) {
      new Gauge({
        name,
        help: GAUGE_HELP[field] ?? help,
        labelNames: ['tier'],
        registers: [registry],
        collect() {
          const tiers = take().tiers;
          for (const tier of TIER_NAMES) this.set({ tier }, tiers?.[tier]?.[field] ?? 0);
        },
      });
      continue;
    }
    new Counter({
      name,
      help,
      labelNames: ['tier'],
      registers: [registry],
      collect() {
        const tiers = take().tiers;
        for (const tier of TIER_NAMES) {
          const now = tiers?.[tier]?.[field] ?? 0;
          const id = `${tier}.${field}`;
          const delta = now - (exported.get(id) ?? 0);
          if (delta > 0) this.inc({ tier }, delta);
          exported.set(id, Math.max(now, exported.get(id) ?? 0));
        }
      },
    });
  }
  const latency = new Histogram({
    name: 'kvoff_tier_store_latency_seconds',
    help: 'store latency per tier: host per copy job, disk and redis per chunk from offer to visible',
    labelNames: ['tier'],
    buckets: TIER_LATENCY_BUCKETS_S,
    registers: [registry],
  });
  // The host level's stores are the copy jobs; the lower levels report each chunk.
  runtime.on('job', (e) => latency.observe({ tier: 'host' }, e.latencyMs / 1000));
  runtime.onTierStore?.((e) => latency.observe({ tier: e.tier }, e.latencyMs / 1000));
}
