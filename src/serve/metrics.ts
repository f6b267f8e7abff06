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
  ['resets', 'kvoff_resets_total', 'resets (POST /v1/reset, vLLM reset_cache) the store ran'],
  [
    'chunksDiscardedByReset',
    'kvoff_chunks_discarded_by_reset_total',
    'chunks of store jobs in flight at a reset: copied, never published',
  ],
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
  [
    'rankAckTimeouts',
    'kvoff_rank_ack_timeouts_total',
    'store jobs failed as a whole because a rank did not acknowledge its copy in time',
  ],
  [
    'loadFailures',
    'kvoff_load_failures_total',
    'loads with a chunk that could not be loaded (a failed copy, or a lower level refused it)',
  ],
  [
    'loadFailureTokensRecomputed',
    'kvoff_load_failure_recomputed_tokens_total',
    'tokens of failed loads from the first failed chunk on, recomputed (loadFailurePolicy recompute)',
  ],
  [
    'requestsFailedByLoad',
    'kvoff_requests_failed_by_load_total',
    'requests failed with LoadFailedError by a load failure (loadFailurePolicy fail)',
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

/** The serving process's own figures: its event-loop delay, requests in flight, HTTP counts. */
function registerServerMetrics(registry: Registry, server: ServerGauges): void {
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
  registerOffloadMetrics(registry, take, runtime);

  registerServerMetrics(registry, server);

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
  const perWorker = (field: Exclude<keyof WorkerMemory, 'heapLiveBytes'>) =>
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

/**
 * storedChunks -> kvoff_tiers_stored_chunks_total{tier}; a gauge field keeps
 * its name without _total (bytesUsed -> kvoff_tiers_bytes_used); a time in
 * microseconds is exported in seconds (storeUs -> kvoff_tiers_store_seconds_total).
 */
function tierMetricName(field: TierCounterField): string {
  const snake = field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  if (TIER_GAUGE_FIELDS.has(field)) return `kvoff_tiers_${snake}`;
  if (field.endsWith('Us')) return `kvoff_tiers_${snake.slice(0, -3)}_seconds_total`;
  return `kvoff_tiers_${snake}_total`;
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
    if (TIER_GAUGE_FIELDS.has(field)) {
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
    const scale = field.endsWith('Us') ? 1e-6 : 1;
    new Counter({
      name,
      help,
      labelNames: ['tier'],
      registers: [registry],
      collect() {
        const tiers = take().tiers;
        for (const tier of TIER_NAMES) {
          const now = (tiers?.[tier]?.[field] ?? 0) * scale;
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

/** Lookup delay buckets in seconds, vLLM's: a call (10 us to 1 s) and a deferred wait (0.1 ms to 10 s). */
const LOOKUP_SYNC_BUCKETS_S = [1e-5, 5e-5, 1e-4, 5e-4, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1];
// Up to two minutes: the wait bound grows with the prompt (2 s + 0.5 s per 1,000 tokens by default).
const LOOKUP_DEFERRED_BUCKETS_S = [
  1e-4, 5e-4, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120,
];

/** Why a store was not made, per tier: the stats fields behind each reason. */
const HOST_SKIPS = [
  ['threshold', 'storesBelowThreshold'],
  ['unreachable', 'chunksUnreachable'],
  ['capacity', 'chunksDroppedForCapacity'],
  ['unready', 'chunksDroppedUnready'],
  ['transfer_failed', 'chunksTransferFailed'],
] as const satisfies readonly (readonly [string, keyof RuntimeStats])[];

/** KV-event counters, from stats().events. */
const EVENT_COUNTERS = [
  ['queued', 'kvoff_events_queued_total', 'chunk changes the store put on the event queue'],
  [
    'dropped',
    'kvoff_events_dropped_total',
    'chunk changes the full event queue refused: never published',
  ],
  [
    'published',
    'kvoff_events_published_total',
    'KV events published (vLLM events; a run of stored chunks is one)',
  ],
  ['batches', 'kvoff_event_batches_total', 'KV-event batches published (sequence numbers used)'],
  [
    'streamDropped',
    'kvoff_event_stream_dropped_batches_total',
    'batches events() streams and /v1/events clients lost by falling behind',
  ],
  [
    'unsent',
    'kvoff_event_batches_unsent_total',
    'batches the ZeroMQ send queue could not take (gaps to replay)',
  ],
  ['replays', 'kvoff_event_replays_total', 'replay requests answered'],
] as const;

/** vLLM's lookup delays: a lookup call's own time, and a deferred lookup's wait. */
function registerLookupHistograms(registry: Registry, runtime: EmbeddableRuntime): void {
  const sync = new Histogram({
    name: 'kvoff_lookup_sync_seconds',
    help: "time the store spent in one lookup call (vLLM's kv_offload_lookup_sync_delay_seconds)",
    buckets: LOOKUP_SYNC_BUCKETS_S,
    registers: [registry],
  });
  const deferred = new Histogram({
    name: 'kvoff_lookup_deferred_seconds',
    help: "time from a lookup's first deferral to the answer that resolved it (vLLM's kv_offload_lookup_async_delay_seconds)",
    buckets: LOOKUP_DEFERRED_BUCKETS_S,
    registers: [registry],
  });
  runtime.onLookup?.((e) => (e.kind === 'sync' ? sync : deferred).observe(e.seconds));
}

/** KV events published and lost, and the open event streams. */
function registerEventMetrics(
  registry: Registry,
  take: () => RuntimeStats,
  advance: (counter: Counter<string>, id: string, now: number) => void,
): void {
  for (const [field, name, help] of EVENT_COUNTERS) {
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const e = take().events;
        if (e !== undefined) advance(this, `events.${field}`, e[field]);
      },
    });
  }
  new Gauge({
    name: 'kvoff_event_streams',
    help: 'open events() streams and /v1/events clients',
    registers: [registry],
    collect() {
      this.set(take().events?.streams ?? 0);
    },
  });
}

/**
 * vLLM's offloading metrics kvoff did not have: lookup delays (a call's own
 * time and a deferred lookup's wait), stores skipped by reason, and KV events
 * published and lost. The per-tier bytes, seconds, usage, pending stores and
 * hit tokens are tier fields (registerTierMetrics).
 */
function registerOffloadMetrics(
  registry: Registry,
  take: () => RuntimeStats,
  runtime: EmbeddableRuntime,
): void {
  registerLookupHistograms(registry, runtime);

  const exported = new Map<string, number>();
  const advance = (
    counter: Counter<string>,
    id: string,
    now: number,
    labels?: Record<string, string>,
  ) => {
    // An increment of 0 still makes the series, so every reason shows from the first scrape.
    const delta = Math.max(0, now - (exported.get(id) ?? 0));
    if (labels) counter.inc(labels, delta);
    else counter.inc(delta);
    exported.set(id, Math.max(now, exported.get(id) ?? 0));
  };
  new Counter({
    name: 'kvoff_stores_skipped_total',
    help: 'chunk stores not made, per tier and reason (host: threshold, unreachable, capacity, unready, transfer_failed; disk and redis: full, busy, unavailable, failed)',
    labelNames: ['tier', 'reason'],
    registers: [registry],
    collect() {
      const s = take();
      for (const [reason, field] of HOST_SKIPS) {
        const v = s[field];
        if (typeof v === 'number') advance(this, `host.${reason}`, v, { tier: 'host', reason });
      }
      for (const tier of ['disk', 'redis'] as const) {
        const c = s.tiers?.[tier];
        if (c === undefined) continue;
        const failed = Math.max(
          0,
          c.droppedChunks - c.fullChunks - c.busyChunks - c.unavailableChunks,
        );
        const reasons = {
          full: c.fullChunks,
          busy: c.busyChunks,
          unavailable: c.unavailableChunks,
          failed,
        };
        for (const [reason, v] of Object.entries(reasons)) {
          advance(this, `${tier}.${reason}`, v, { tier, reason });
        }
      }
    },
  });
  new Counter({
    name: 'kvoff_lookups_asked_again_total',
    help: 'lookups answered "ask again later", by reason: pending (an entry they need is being written or read, vLLM\'s HIT_PENDING) or retry (a lower level had not answered, vLLM\'s RETRY)',
    labelNames: ['reason'],
    registers: [registry],
    collect() {
      const s = take();
      advance(this, 'asked.pending', s.lookupsDeferred, { reason: 'pending' });
      advance(this, 'asked.retry', s.lookupsRetried, { reason: 'retry' });
    },
  });
  new Gauge({
    name: 'kvoff_tiers_usage_ratio',
    help: "per tier: bytes held over capacity (vLLM's kv_offload_cpu_cache_usage_perc for host); no sample where the level has no capacity of its own",
    labelNames: ['tier'],
    registers: [registry],
    collect() {
      this.reset();
      const tiers = take().tiers;
      for (const tier of TIER_NAMES) {
        const c = tiers?.[tier];
        if (c !== undefined && c.capacityBytes > 0)
          this.set({ tier }, c.bytesUsed / c.capacityBytes);
      }
    },
  });
  registerEventMetrics(registry, take, advance);
}
