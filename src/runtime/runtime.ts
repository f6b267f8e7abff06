// OffloadRuntime: the embedding API. Main thread only; it never calls
// Atomics.wait. It lays out the shared memory, starts one worker per role
// (scheduler with the built-in engine simulator, hasher, allocator, store with
// its piscina transfer pool), feeds submissions through the submit ring, and
// learns about ended requests, drained requests and finished copies from
// worker messages. Workers are ref'd only while something is pending, so an
// idle runtime does not keep the process alive, and a pending operation does.
import { EventEmitter } from 'node:events';
import type { Worker } from 'node:worker_threads';
import { resolveConfig } from '../config.js';
import type { Config, ConfigInput } from '../config.js';
import {
  ClosedError,
  InvalidArgumentError,
  QueueFullError,
  RequestCapacityError,
  SharedResetFailedError,
  TimeoutError,
  TransferBackendFailedError,
  WorkerFailedError,
} from '../errors.js';
import { readRuntimeMemory, requestCollection } from './memory.js';
import { OWNER_ROLES, S_GENERATION } from '../layout.js';
import { closeRoles } from '../roles/claim.js';
import type { StorePolicy } from '../ready.js';
import { parseStorePolicy } from '../ready.js';
import { RuntimeViews, createRuntimeBuffers } from './buffers.js';
import type { RuntimeBuffers } from './buffers.js';
import { DEFAULT_SEED, runtimeConfigInput } from './defaults.js';
import { DEFAULT_ENGINE_OPTIONS, resolveEngineOptions } from './engine-sim.js';
import type { EngineOptions, EngineSummary } from './engine-sim.js';
import { CONTROL_CLOSING, CONTROL_STOP, DOORBELLS, RINGS, STAT_INDEX } from './thread-words.js';
import type { DoorbellName } from './thread-words.js';
import { OP_SUBMIT, UNSET, pushText } from './protocol.js';
import type { FaultInjection, RoleMessage, RoleName, RoleWorkerData } from './role-main.js';
import { startRefusalError } from './start-refusal.js';
import { readAllStats } from './stats.js';
import type { RuntimeStats } from './stats.js';
import type { DrainedRequest, JobEvent, VerifyReport } from './store-loop.js';
import { spawnWorker, workerUrl } from './worker-files.js';
import { backendModuleHref, loadTransferBackendModule } from './backend.js';
import { ExternalHost } from './external.js';
import { checkLoadableGroups, validateRequestInput } from './request-rules.js';
import type { RequestInput } from './request-rules.js';
import type { TracedRequest as RequestTrace } from './trace-recorder.js';
import { checkShareable, validateTiersOptions } from '../tier/cascade.js';
import type { LowerTierSwitches } from '../tier/lower.js';
import { refuseUnknownKeys } from '../known-keys.js';
import type { RedisTlsOptions } from '../tier/redis-access.js';
import type { KnownKeys } from '../known-keys.js';
import type { TiersOptions } from '../tier/cascade.js';
import { validateCacheOptions } from '../tier/policy/index.js';
import type { CacheOptions } from '../tier/policy/index.js';
import type { LowerTierName, TierStoreSample } from '../tier/lower.js';
import { readTierStats } from '../tier/tier-stats.js';
import type { LookupSample } from './lookup-timing.js';
import { EventHub } from '../events/hub.js';
import { RuntimeGpu, TRANSFER_BACKENDS } from './runtime-gpu.js';
import type { TransferBackendName } from './runtime-gpu.js';
import type { WebGpuAdapterInfo } from './webgpu-device.js';
import type { GpuRings } from './webgpu-loop.js';
import { STREAM_BUFFER_DEFAULT } from '../events/stream.js';
import type { KvEventStream } from '../events/stream.js';
import { resolveEventsOptions } from '../events/types.js';
import type { EventsOptions } from '../events/types.js';

export type { RuntimeStats } from './stats.js';
export type { RequestInput } from './request-rules.js';
export type { VerifyReport, JobEvent } from './store-loop.js';

export interface LagOptions {
  /** Hash blocks the hasher publishes per slot per wake-up. */
  hasherHashesPerWake?: number;
  /** Delay between the allocator answering the scheduler and publishing the block IDs. */
  allocatorPublishDelayMs?: number;
  /** Random extra delay in [0, jitterMs) on both. */
  jitterMs?: number;
  seed?: number;
}

export interface RuntimeOptions {
  /**
   * Default: DEFAULT_RUNTIME_CONFIG (hybrid: full + sliding-window). A
   * partial config is merged over it: each field left out takes
   * DEFAULT_RUNTIME_CONFIG's value (see runtimeConfigInput).
   */
  config?: Partial<ConfigInput>;
  /** Default 'ready-prefix'. */
  policy?: StorePolicy;
  /** piscina threads that copy, default 1. */
  transferThreads?: number;
  /**
   * Your own copy backend: a module (a URL, an absolute path or a package name)
   * exporting `createTransferBackend(arenas, { threads })`, loaded in the store
   * worker; see docs/embedding.md. Default: kvoff's piscina pool over the arenas.
   */
  transferBackendModule?: string | URL;
  /**
   * What holds the GPU's KV and copies it: 'shared-memory' (default, host
   * memory and piscina threads) or 'webgpu' (a WebGPU device on kvoff's GPU
   * thread through the optional `webgpu` package; with `external`, the
   * engine's own device, served on its thread with WebGpuCopyServer.serve
   * over `runtime.webgpuRings`). start() rejects with WebGpuUnavailableError
   * when the package or an adapter is missing.
   */
  transferBackend?: TransferBackendName;
  lag?: LagOptions;
  simulator?: Partial<EngineOptions>;
  /** Record per-pass windows of the first N requests (for the HTML report); 0 by default. */
  traceSlots?: number;
  /** Test only: the store does not pin, the pool ignores pins. Shows why pins exist. */
  unsafeSkipPins?: boolean;
  /** Test only: each copy sleeps this long first (widens the reuse-mid-copy window). */
  transferDelayMs?: number;
  /**
   * Test only: the lower levels' switches (LowerTierSwitches), e.g.
   * unsafeKeyWordOnly, which serves an entry whose key word collides. Shows
   * what each check prevents; never set it otherwise.
   */
  unsafeTierSwitches?: LowerTierSwitches;
  /** Test only: make one role's worker throw after N loop steps. */
  faultInjection?: FaultInjection;
  /** Submits pending at once before submit() rejects with QueueFullError; default PENDING_SUBMITS_MAX. */
  pendingSubmitsMax?: number;
  /** Bound on every wait of close() (ms), default 60,000. */
  closeTimeoutMs?: number;
  /**
   * How long an ended request waits, with no new key or block ID arriving,
   * before what is still missing is counted as dropped (chunksDroppedUnready), in ms;
   * default FINAL_WAIT_MS_MAX (1,000). It matters when a host never calls
   * settle() (external mode): its requests drain after this wait.
   */
  finalWaitMsMax?: number;
  /**
   * Store copies that may fail in a row before the backend is taken as
   * broken and the runtime fails (WorkerFailedError naming 'transfer', cause
   * TransferBackendFailedError); default TRANSFER_FAILURES_MAX (16). A single
   * failed copy only fails its job: its chunks are counted in
   * chunksTransferFailed and the runtime goes on.
   */
  transferFailuresMax?: number;
  /**
   * The host program feeds scheduler and allocator events itself through
   * `runtime.external` (or from its own workers via attachExternal); the
   * runtime runs the hasher, the store and the transfer pool. submit() is then
   * unavailable.
   */
  external?: boolean;
  /**
   * Levels below host memory: a disk directory that survives restarts and a
   * Redis Cluster that engine instances share. Host only by default.
   */
  tiers?: TiersOptions;
  /**
   * false: offloading off, the baseline an engine without kvoff would be. No
   * store worker and no transfer pool start; the engine opens every request
   * with maxOffloadTokens 0 and asks for no tier prefix, and the allocator
   * frees a request's blocks as soon as it ends (no drained mark to wait for).
   * verify() is then unavailable. Default true.
   */
  offload?: boolean;
  /**
   * KV events of every tier change (vLLM's BlockStored, BlockRemoved,
   * AllBlocksCleared): to `events()` streams, and over ZeroMQ with an
   * endpoint. Off by default (nothing is captured, zeromq is never loaded).
   */
  events?: EventsOptions;
  /**
   * The host tier's cache policy ('lru' by default, 'arc', 's3-fifo') and
   * admission threshold (storeThreshold: store a chunk only once lookups
   * asked for it that many times, vLLM's store_threshold; 1 by default).
   */
  cache?: CacheOptions;
}

export interface RequestSummary {
  requestId: number;
  status: 'finished' | 'aborted';
  promptTokens: number;
  decodedTokens: number;
  chunksStored: number;
  chunksDeferred: number;
  hitChunks: number;
  preemptions: number;
  /** Chunks token-ready when the request ended, summed over groups (0 if it never held a slot). */
  tokenChunks: number;
  /** Of those, chunks accounted for without being stored: loaded, already present, slid out, or counted as dropped. */
  chunksCounted: number;
  /** Token-ready chunks neither stored nor counted (must be 0). */
  holes: number;
  /** Why the engine ended it early, e.g. `gpu-pool: ...` when it can never fit the GPU pool. */
  reason?: string;
}

/** What close() found left over; every field is 0 after a clean run. */
export interface LeakReport {
  blocksInUse: number;
  blocksQuarantined: number;
  pinsOutstanding: number;
  slotsInUse: number;
  tierEntriesWriting: number;
  tierEntriesReading: number;
  jobsInFlight: number;
}

/** Per-pass windows of traced requests (one definition, in the recorder); `trace()` makes `atMs` relative to the start. */
export type { TracedPass as TracePass, TracedRequest as RequestTrace } from './trace-recorder.js';

const ROLES: readonly RoleName[] = DOORBELLS;

/** What `OffloadRuntime.start({ external: true })` resolves to: `external` is always there. */
export type ExternalRuntime = OffloadRuntime & { readonly external: ExternalHost };

/** Submits pending at once; beyond this submit() rejects with QueueFullError (bounds every queue behind it). */
export const PENDING_SUBMITS_MAX = 1 << 16;

/** Largest submit ring (16 MiB); a bigger explicit prompt is refused by submit(). */
export const SUBMIT_RING_WORDS_MAX = 1 << 22;

/**
 * Submit ring capacity: room for the largest record submit() can send (an
 * explicit prompt of maxTokensPerRequest - 1 tokens, its 8 header words and
 * the 2 load-limit words) since a ring record holds at most half the ring,
 * but not below the default and not above SUBMIT_RING_WORDS_MAX.
 */
export function submitRingWords(config: Pick<Config, 'maxTokensPerRequest'>): number {
  const recordWords = 8 + (config.maxTokensPerRequest - 1) + 2;
  let words: number = RINGS.submit.words;
  while (words < SUBMIT_RING_WORDS_MAX && (words >> 1) - 1 < recordWords) words *= 2;
  return words;
}

interface Pending {
  resolve: (s: RequestSummary) => void;
  reject: (e: Error) => void;
  engine?: EngineSummary;
  store?: DrainedRequest;
}

export class OffloadRuntime {
  readonly config: Config;
  readonly buffers: RuntimeBuffers;
  /** With `external: true`: the host's role views, block pool and drain protocol. */
  readonly external: ExternalHost | undefined;
  private readonly roles: readonly RoleName[];
  private readonly views: RuntimeViews;
  private readonly options: RuntimeOptions;
  private readonly workers = new Map<RoleName, Worker>();
  private readonly stopping = new Set<RoleName>();
  private readonly exited = new Map<RoleName, Promise<void>>();
  private readonly finals = new Map<RoleName, Record<string, number>>();
  /** Why each lower level is degraded, as the store last said. */
  private readonly tierProblems = new Map<LowerTierName, string>();
  /** Called when a role's final report arrives (stop() waits on it). */
  private readonly onFinal = new Map<RoleName, () => void>();
  private readonly pending = new Map<number, Pending>();
  /** verify() calls the store has not answered yet: each settles exactly once. */
  private readonly verifies = new Map<number, PendingVerify>();
  /** reset() calls the store has not answered yet: each settles exactly once. */
  private readonly resets = new Map<number, PendingReset>();
  private readonly emitter = new EventEmitter();
  private readonly backlog: number[][] = [];
  private backlogTimer: NodeJS.Timeout | undefined;
  private nextRequestId = 1;
  private nextVerifyId = 1;
  private failure: WorkerFailedError | undefined;
  private closing: Promise<void> | undefined;
  private closed = false;
  private refs = 0;
  private leaks: LeakReport | undefined;
  private readonly traces: RequestTrace[] = [];
  private readonly startedAtEpochMs = Date.now();
  /** KV events' main side, with `events` on. */
  private hub: EventHub | undefined;
  /** The WebGPU device's rings and thread, with transferBackend 'webgpu'. */
  private gpu: RuntimeGpu | undefined;

  private constructor(config: Config, options: RuntimeOptions) {
    this.config = config;
    this.options = options;
    // The submit ring fits the largest prompt submit() accepts: a record that
    // does not fit a ring can never be sent (it left submit() pending forever,
    // or threw from the backlog timer and took the process down).
    this.buffers = createRuntimeBuffers(
      config,
      { submit: submitRingWords(config) },
      { events: options.events !== undefined && options.offload !== false },
    );
    this.views = new RuntimeViews(config, this.buffers);
    this.external = options.external
      ? new ExternalHost(config, this.buffers, (o) => this.reset(o))
      : undefined;
    this.roles = options.external
      ? ['hasher', 'store']
      : options.offload === false
        ? ROLES.filter((r) => r !== 'store')
        : ROLES;
  }

  /** Lays out shared memory and starts every role worker; resolves once all are attached. */
  static async start(options: RuntimeOptions & { external: true }): Promise<ExternalRuntime>;
  static async start(options?: RuntimeOptions): Promise<OffloadRuntime>;
  static async start(options: RuntimeOptions = {}): Promise<OffloadRuntime> {
    if (typeof options !== 'object' || options === null || Array.isArray(options)) {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    refuseUnknownKeys(options, RUNTIME_OPTION_KEYS, '');
    const config = resolveConfig(runtimeConfigInput(options.config));
    validateOptions(options);
    // A shared tier without a named model (or with xxHash keys): a typed error before any worker starts.
    if (options.tiers !== undefined) checkShareable(options.tiers, config);
    // A bad backend module is refused here, as a typed error, before any worker starts.
    if (options.transferBackendModule !== undefined) {
      await loadTransferBackendModule(backendModuleHref(options.transferBackendModule));
    }
    if (!options.external) {
      const engine = resolveEngineOptions(options.simulator ?? {}, config.maxRequests);
      // Only where the built-in engine would load (offload: false loads nothing).
      if (engine.loadFromTier && options.offload !== false) checkLoadableGroups(config);
    }
    const rt = new OffloadRuntime(config, options);
    // Opened first: an endpoint that cannot be used fails the start before any worker runs.
    if (rt.buffers.events) {
      rt.hub = await EventHub.open(rt.buffers.events, config, resolveEventsOptions(options.events));
    }
    try {
      if (options.transferBackend === 'webgpu') {
        rt.gpu = await RuntimeGpu.open(
          config,
          rt.views,
          rt.buffers.memory,
          !options.external,
          (c) => rt.fail('transfer', c),
        );
      }
      await rt.spawnAll();
    } catch (err) {
      await rt.gpu?.close();
      await rt.hub?.close();
      throw err;
    }
    return rt;
  }

  /**
   * Submits a simulated request to the built-in engine; resolves when it
   * finished or was aborted. Checked by the same rules as the HTTP layer's:
   * rejects with InvalidArgumentError (or RequestCapacityError when its prompt
   * can never fit the GPU pool) and sends nothing.
   */
  submit(req: RequestInput): Promise<RequestSummary> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClosedError('runtime'));
    if (this.external) {
      return Promise.reject(
        new InvalidArgumentError(
          'submit',
          'not available with external: true; feed events through runtime.external',
        ),
      );
    }
    const limit = this.options.pendingSubmitsMax ?? PENDING_SUBMITS_MAX;
    if (this.pending.size >= limit) {
      return Promise.reject(new QueueFullError('OffloadRuntime submit queue', limit));
    }
    let record: number[];
    try {
      record = this.encode(validateRequestInput(req, this.config), this.nextRequestId);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    // Checked before anything is held: only a config past SUBMIT_RING_WORDS_MAX gets here.
    const recordWordsMax = this.views.ring('submit').recordWordsMax;
    if (record.length > recordWordsMax) {
      return Promise.reject(
        new RequestCapacityError(
          'explicit prompt tokens per submit',
          recordWordsMax - 10,
          record[7]!,
        ),
      );
    }
    const requestId = this.nextRequestId++;
    return new Promise<RequestSummary>((resolve, reject) => {
      this.pending.set(requestId, { resolve, reject });
      this.hold();
      this.send(record);
    });
  }

  /**
   * KV-event batches from now on, as an async iterator with a bounded buffer
   * (`bufferMax` batches, default 1,024): a reader that falls behind loses the
   * newest, counted in the stream's `dropped`. Ends when the runtime closes.
   * Needs `events` in the start options.
   */
  events(options: { bufferMax?: number } = {}): KvEventStream {
    if (this.hub === undefined) {
      throw new InvalidArgumentError(
        'events',
        'start the runtime with events: {} to stream KV events',
      );
    }
    const max = options.bufferMax ?? STREAM_BUFFER_DEFAULT;
    if (!Number.isInteger(max) || max < 1 || max > 1 << 20) {
      throw new InvalidArgumentError('bufferMax', 'must be an integer in [1, 1048576]');
    }
    return this.hub.stream(max);
  }

  /** Where KV events go over ZeroMQ (bound addresses resolved), when an endpoint is configured. */
  get eventEndpoints(): { endpoint: string; replayEndpoint?: string } | undefined {
    const p = this.hub?.publisher;
    if (p === undefined) return undefined;
    return {
      endpoint: p.endpoint,
      ...(p.replayEndpoint ? { replayEndpoint: p.replayEndpoint } : {}),
    };
  }

  /** The worker failure that stopped this runtime, if any: submit() and verify() then reject with it. */
  get failedWith(): WorkerFailedError | undefined {
    return this.failure;
  }

  /**
   * Runs a full garbage collection on main now and asks every worker to run
   * one before its next memory sample (within about 250 ms of its loop's next
   * turn); `stats().memory` then gives each thread's heapLiveBytes, the heap
   * that survived it. Heap in use at an arbitrary moment also counts garbage
   * not yet collected, which drifts with V8's heap sizing: a leak shows in the
   * live heap. Needs `node --expose-gc`; without it nothing is asked and this
   * returns false. Each collection pauses its thread for a few milliseconds.
   */
  collectMemory(): boolean {
    return requestCollection(this.views.memory);
  }

  /** A synchronous snapshot of the shared counters. */
  stats(): RuntimeStats {
    const s = readAllStats(this.views.stats);
    return {
      requests: s.requests,
      completed: s.completed,
      aborted: s.aborted,
      preemptions: s.preemptions,
      chunksStored: s.chunksStored,
      chunksDeferred: s.chunksDeferred,
      chunksSkippedUnready: s.chunksSkippedUnready,
      chunksDeferredThenStored: s.chunksDeferredThenStored,
      allocationRetries: s.allocationRetries,
      tierHits: s.tierHits,
      bytesCopied: s.bytesCopied,
      pinsOutstanding: this.pinsOutstanding(),
      snapshotRetries: s.snapshotRetries,
      jobsInFlight: s.jobsInFlight,
      tierUsed: s.tierUsed,
      tierCapacity: this.config.tierChunks,
      holes: s.holes,
      mismatches: s.loadMismatches + s.verifyMismatches,
      chunksDroppedForCapacity: s.chunksDroppedForCapacity,
      chunksDroppedUnready: s.chunksDroppedUnready,
      chunksUnreachable: s.chunksUnreachable,
      lookupsDeferred: s.lookupsDeferred,
      lookupsRetried: s.lookupsRetried,
      storesBelowThreshold: s.storesBelowThreshold,
      lookupCalls: s.lookupCalls,
      lookupCallSeconds: s.lookupCallUs / 1e6,
      lookupsResolvedAfterDefer: s.lookupsResolvedAfterDefer,
      lookupDeferredSeconds: s.lookupDeferredUs / 1e6,
      lookupWaitMsMax: s.lookupWaitMsMax,
      stepsPlannedDuringLookups: s.stepsPlannedDuringLookups,
      recordsRefused: s.recordsRefused,
      resets: s.resets,
      chunksDiscardedByReset: s.chunksDiscardedByReset,
      jobsTransferFailed: s.jobsTransferFailed,
      chunksTransferFailed: s.chunksTransferFailed,
      jobsHeld: s.jobsHeld,
      tiers: readTierStats(
        this.views.tierStats,
        new Set((['disk', 'redis'] as const).filter((t) => this.options.tiers?.[t] !== undefined)),
        this.options.tiers?.secret !== undefined,
        this.tierProblems,
      ),
      memory: readRuntimeMemory(this.views.memory),
      ...(this.hub ? { events: this.hub.stats(s.eventsQueued, s.eventsDropped) } : {}),
      ...(this.failure
        ? {
            failure: {
              code: failureCode(this.failure),
              role: this.failure.role,
              message: this.failure.message,
            },
          }
        : {}),
    };
  }

  /**
   * Every readable tier entry's bytes against its key, plus the hole and
   * double-store counts so far. Rejects with WorkerFailedError if a worker
   * fails before the answer, and with ClosedError once close() has begun (a
   * call pending when close() stops the store is rejected then).
   */
  verify(): Promise<VerifyReport> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClosedError('runtime'));
    if (this.options.offload === false) {
      return Promise.reject(
        new InvalidArgumentError('verify', 'not available with offload: false (no store runs)'),
      );
    }
    const store = this.workers.get('store');
    if (store === undefined) return Promise.reject(new ClosedError('runtime store'));
    const id = this.nextVerifyId++;
    this.hold();
    return new Promise<VerifyReport>((resolve, reject) => {
      this.verifies.set(id, {
        resolve: (report) => {
          this.release();
          // Only main writes this word: the mismatches verify found, added up.
          Atomics.add(this.views.stats, statIndexVerify, BigInt(report.mismatches));
          resolve(report);
        },
        reject: (err) => {
          this.release();
          reject(err);
        },
      });
      store.postMessage({ type: 'verify', id });
    });
  }

  /**
   * vLLM's reset_cache (and, with `shared`, reset_prefix_cache's
   * reset_external): the host tier is emptied between two store steps; copies
   * in flight finish and publish nothing (stores are ignored by job id, loads
   * read slots the reset retired); every live request that was not drained
   * stores its chunks again from cursor 0; a request already drained is not
   * signalled again. With `shared: true` the disk and Redis tiers also move
   * their scope's epoch, which retires every entry of this namespace and
   * layout for every instance (other namespaces untouched, no FLUSHALL).
   * Resolves once done; rejects with SharedResetFailedError when a level
   * could not store its new epoch (the host tier was reset), ClosedError
   * after close(), WorkerFailedError if the store fails first.
   */
  reset(options: { shared?: boolean } = {}): Promise<void> {
    if (typeof options !== 'object' || options === null) {
      return Promise.reject(new InvalidArgumentError('options', 'must be an object'));
    }
    if (options.shared !== undefined && typeof options.shared !== 'boolean') {
      return Promise.reject(new InvalidArgumentError('shared', 'must be a boolean'));
    }
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClosedError('runtime'));
    // No store runs: nothing is stored anywhere, nothing to reset.
    if (this.options.offload === false) return Promise.resolve();
    const store = this.workers.get('store');
    if (store === undefined) return Promise.reject(new ClosedError('runtime store'));
    const id = this.nextVerifyId++;
    this.hold();
    return new Promise<void>((resolve, reject) => {
      this.resets.set(id, {
        resolve: () => {
          this.release();
          resolve();
        },
        reject: (err) => {
          this.release();
          reject(err);
        },
      });
      store.postMessage({ type: 'reset', id, shared: options.shared === true });
      // A parked store handles the message at its next turn; wake it now.
      this.views.doorbell('store').ring();
    });
  }

  /**
   * Per-pass windows of the traced requests (ids 1..traceSlots) that ended so
   * far, in the order they ended; empty unless traceSlots > 0.
   */
  trace(): RequestTrace[] {
    // The store thread stamps passes with wall-clock ms; report them from start().
    return this.traces.map((t) => ({
      ...t,
      passes: t.passes.map((p) => ({ ...p, atMs: p.atMs - this.startedAtEpochMs })),
    }));
  }

  /** After close(): what was left over (all zero after a clean run); undefined before. */
  leakReport(): LeakReport | undefined {
    return this.leaks;
  }

  /** Same as on('lookup', fn) (the serve layer's optional hook). */
  onLookup(fn: (e: LookupSample) => void): this {
    return this.on('lookup', fn);
  }

  /** The WebGPU adapter kvoff's GPU thread opened (transferBackend 'webgpu' with the built-in engine). */
  get webgpuAdapter(): WebGpuAdapterInfo | undefined {
    return this.gpu?.adapter;
  }

  /**
   * With transferBackend 'webgpu' and `external`: the rings an engine that
   * holds its KV in WebGPU buffers serves on its device's thread
   * (WebGpuCopyServer.serve(runtime.webgpuRings, { device, buffers })).
   */
  get webgpuRings(): GpuRings | undefined {
    return this.gpu?.thread === undefined ? this.gpu?.servedRings : undefined;
  }

  /** Same as on('tierStore', fn) (the serve layer's optional hook). */
  onTierStore(fn: (e: TierStoreSample) => void): this {
    return this.on('tierStore', fn);
  }

  /** Each finished store job (its chunks, bytes and latency); loads are not reported here. */
  on(event: 'job', fn: (e: JobEvent) => void): this;
  /** One store's latency at one level (host per job, disk and Redis per chunk). */
  on(event: 'tierStore', fn: (e: TierStoreSample) => void): this;
  /** One lookup timing: a call's own time ('sync'), or a deferred lookup's wait until resolved ('deferred'). */
  on(event: 'lookup', fn: (e: LookupSample) => void): this;
  on(
    event: 'job' | 'tierStore' | 'lookup',
    fn: ((e: JobEvent) => void) | ((e: TierStoreSample) => void) | ((e: LookupSample) => void),
  ): this {
    this.emitter.on(event, fn);
    return this;
  }

  /**
   * Aborts what is still running, drains in-flight copies, ends every worker.
   * A second call returns the same promise. Every wait is bounded.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  // --- internals ---

  private async spawnAll(): Promise<void> {
    const lag = this.options.lag ?? {};
    const seed = lag.seed ?? DEFAULT_SEED;
    const base: Omit<RoleWorkerData, 'role'> = {
      config: this.config,
      buffers: this.buffers,
      hasher: {
        hashesPerWake: lag.hasherHashesPerWake ?? 64,
        jitterMs: lag.jitterMs ?? 1,
        seed,
      },
      allocator: {
        publishDelayMs: lag.allocatorPublishDelayMs ?? 1,
        jitterMs: lag.jitterMs ?? 1,
        seed,
        unsafeIgnorePins: this.options.unsafeSkipPins ?? false,
        awaitDrained: this.options.offload !== false,
      },
      store: {
        transferThreads: this.options.transferThreads ?? 1,
        unsafeSkipPins: this.options.unsafeSkipPins ?? false,
        transferDelayMs: this.options.transferDelayMs ?? 0,
        traceRequests: this.options.traceSlots ?? 0,
        ...(this.options.cache ? { cache: this.options.cache } : {}),
        ...(this.options.finalWaitMsMax !== undefined
          ? { finalWaitMsMax: this.options.finalWaitMsMax }
          : {}),
        ...(this.options.transferFailuresMax !== undefined
          ? { transferFailuresMax: this.options.transferFailuresMax }
          : {}),
        ...(this.options.transferBackendModule !== undefined
          ? { transferBackendModule: backendModuleHref(this.options.transferBackendModule) }
          : {}),
      },
      simulator: {
        seed,
        ...this.options.simulator,
        // No store answers lookups or stores chunks: the engine asks for neither.
        ...(this.options.offload === false ? { offload: false, loadFromTier: false } : {}),
      },
      policy: this.options.policy ?? 'ready-prefix',
      ...(this.options.tiers ? { tiers: this.options.tiers } : {}),
      ...(this.options.unsafeTierSwitches ? { tierSwitches: this.options.unsafeTierSwitches } : {}),
      ...(this.options.faultInjection ? { fault: this.options.faultInjection } : {}),
      ...(this.gpu ? { gpu: this.gpu.rings } : {}),
    };
    const ready = this.roles.map((role) => this.spawn(role, { ...base, role }));
    try {
      await Promise.all(ready);
    } catch (err) {
      await this.terminateAll();
      throw err;
    }
    this.updateRef();
  }

  private spawn(role: RoleName, data: RoleWorkerData): Promise<void> {
    let worker: Worker;
    try {
      worker = spawnWorker(workerUrl(role), { workerData: data, name: `kvoff-${role}` });
    } catch (err) {
      // new Worker throws synchronously (Node's permission model without
      // --allow-worker, a refused flag): a rejection, so start() ends the roles
      // already spawned instead of leaving them running behind the throw.
      return Promise.reject(new WorkerFailedError(role, spawnRefusal(err)));
    }
    this.workers.set(role, worker);
    let exitResolve!: () => void;
    this.exited.set(role, new Promise<void>((r) => (exitResolve = r)));
    return new Promise<void>((resolve, reject) => {
      let started = false;
      worker.on('message', (m: RoleMessage) => {
        if (m.type === 'ready') {
          started = true;
          resolve();
        } else if (m.type === 'startRefused') {
          // The worker returns after this: its exit is expected, not a failure.
          this.stopping.add(role);
          reject(startRefusalError(m.error));
        } else this.onMessage(m);
      });
      worker.on('error', (err) => {
        this.fail(role, err);
        if (!started) reject(this.failure ?? new WorkerFailedError(role, err));
      });
      worker.on('exit', (code) => {
        exitResolve();
        this.workers.delete(role);
        if (!this.stopping.has(role)) this.fail(role, `exited unexpectedly with code ${code}`);
        // Ended by the runtime because another role failed first: report that one.
        if (!started)
          reject(
            this.failure ??
              new WorkerFailedError(role, `exited with code ${code} before it started`),
          );
      });
    });
  }

  private onMessage(m: RoleMessage): void {
    switch (m.type) {
      case 'ended': {
        const p = this.pending.get(m.summary.requestId);
        if (p === undefined) return;
        p.engine = m.summary;
        // With no store running no drained message comes: the engine's word is the last.
        if (!m.summary.opened || this.options.offload === false) {
          this.settle(m.summary.requestId, p);
          return;
        }
        // The store's drained message may come first (different ports): settle on the second.
        if (p.store) this.settle(m.summary.requestId, p);
        return;
      }
      case 'drained': {
        if (m.request.trace && this.traces.length < (this.options.traceSlots ?? 0)) {
          this.traces.push(m.request.trace);
        }
        const p = this.pending.get(m.request.requestId);
        if (p === undefined) return;
        p.store = m.request;
        if (p.engine) this.settle(m.request.requestId, p);
        return;
      }
      case 'jobs':
        for (const e of m.events) this.emitter.emit('job', e);
        return;
      case 'tierStores':
        for (const e of m.samples) this.emitter.emit('tierStore', e);
        return;
      case 'lookups':
        for (const e of m.samples) this.emitter.emit('lookup', e);
        return;
      case 'verified': {
        const done = this.verifies.get(m.id);
        this.verifies.delete(m.id);
        done?.resolve(m.report);
        return;
      }
      case 'tierProblem':
        if (m.problem === null) this.tierProblems.delete(m.tier);
        else this.tierProblems.set(m.tier, m.problem);
        return;
      case 'reset': {
        const done = this.resets.get(m.id);
        this.resets.delete(m.id);
        if (m.failedTier === undefined) done?.resolve();
        else done?.reject(new SharedResetFailedError(m.failedTier, m.cause));
        return;
      }
      case 'final':
        this.finals.set(m.role, m.report);
        this.onFinal.get(m.role)?.();
        return;
      case 'traces':
        // Traced requests the store saw before it failed, up to the failure.
        for (const t of m.traces) {
          if (this.traces.length < (this.options.traceSlots ?? 0)) this.traces.push(t);
        }
        return;
      case 'failed':
        this.fail(m.role, new TransferBackendFailedError(m.failuresInRow, m.cause));
        return;
      default:
        return;
    }
  }

  private settle(requestId: number, p: Pending): void {
    this.pending.delete(requestId);
    this.release();
    const e = p.engine!;
    p.resolve({
      requestId,
      status: e.status,
      promptTokens: e.promptTokens,
      decodedTokens: e.decodedTokens,
      chunksStored: p.store?.chunksStored ?? 0,
      chunksDeferred: p.store?.chunksDeferred ?? 0,
      hitChunks: e.hitChunks,
      preemptions: e.preemptions,
      tokenChunks: p.store?.tokenChunks ?? 0,
      chunksCounted: p.store?.chunksCounted ?? 0,
      holes: p.store?.holes ?? 0,
      ...(e.reason === undefined ? {} : { reason: e.reason }),
    });
  }

  private fail(role: RoleName | 'transfer', cause: unknown): void {
    if (this.failure) return;
    this.failure = new WorkerFailedError(role, cause);
    for (const [, p] of this.pending) p.reject(this.failure);
    this.pending.clear();
    this.rejectVerifies(this.failure);
    this.refs = 0;
    // The other roles cannot make progress without this one: stop them all.
    void this.terminateAll();
    void this.gpu?.close();
  }

  /** Settles every unanswered verify() and reset() with `err` (each exactly once). */
  private rejectVerifies(err: Error): void {
    const pending = [...this.verifies.values(), ...this.resets.values()];
    this.verifies.clear();
    this.resets.clear();
    for (const v of pending) v.reject(err);
  }

  private async terminateAll(): Promise<void> {
    for (const role of this.roles) this.stopping.add(role);
    await Promise.all([...this.workers.values()].map((w) => w.terminate()));
  }

  /** A record for the submit ring; `req` passed validateRequestInput (the one validator). */
  private encode(req: RequestInput, requestId: number): number[] {
    const tokens = req.promptTokens;
    const length = tokens?.length ?? req.promptLength!;
    const record = [
      OP_SUBMIT,
      requestId,
      length,
      req.prefixId ?? UNSET,
      // A prefixId alone shares the whole prompt: the same id and length give the same prompt.
      req.sharedPrefixTokens ?? (req.prefixId !== undefined ? length : 0),
      req.maxDecodeTokens ?? UNSET,
      req.abortAfterTokens ?? UNSET,
    ];
    record.push(tokens?.length ?? 0);
    if (tokens) for (const t of tokens) record.push(t);
    if (
      req.maxLoadTokens !== undefined ||
      req.skipReadingPrefixCache === true ||
      req.cacheSalt !== undefined
    ) {
      record.push(req.maxLoadTokens ?? UNSET, req.skipReadingPrefixCache === true ? 1 : 0);
    }
    if (req.cacheSalt !== undefined) pushText(record, req.cacheSalt);
    return record;
  }

  private send(record: number[]): void {
    const ring = this.views.ring('submit');
    if (this.backlog.length === 0 && ring.push(record)) {
      this.views.doorbell('scheduler').ring();
      return;
    }
    this.backlog.push(record);
    this.flushBacklog();
  }

  /** The submit ring was full: retry on a timer (main never waits on shared memory). */
  private flushBacklog(): void {
    const ring = this.views.ring('submit');
    while (this.backlog.length > 0 && ring.push(this.backlog[0]!)) this.backlog.shift();
    this.views.doorbell('scheduler').ring();
    if (this.backlog.length > 0 && this.backlogTimer === undefined && !this.failure) {
      this.backlogTimer = setTimeout(() => {
        this.backlogTimer = undefined;
        this.flushBacklog();
      }, 1);
    }
  }

  private hold(): void {
    this.refs += 1;
    this.updateRef();
  }

  private release(): void {
    this.refs = Math.max(0, this.refs - 1);
    this.updateRef();
  }

  /** Workers keep the process alive exactly while something is pending. */
  private updateRef(): void {
    const keep = this.refs > 0 || (this.closing !== undefined && !this.closed);
    for (const w of this.workers.values()) {
      if (keep) w.ref();
      else w.unref();
    }
  }

  private pinsOutstanding(): number {
    const pins = this.views.state.pins;
    let n = 0;
    for (let b = 0; b < pins.length; b += 1) n += Atomics.load(pins, b);
    return n;
  }

  private async doClose(): Promise<void> {
    this.updateRef();
    const timeoutMs = this.options.closeTimeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    if (!this.failure) {
      Atomics.store(this.views.control, CONTROL_CLOSING, 1);
      this.views.doorbell('scheduler').ring();
      // Every pending request ends (the engine aborts what is left).
      await this.until(() => this.pending.size === 0 || this.failure !== undefined, deadline);
      // Stop in dependency order: engine, then store (drains copies), then allocator (frees quarantine), hasher.
      for (const role of ['scheduler', 'store', 'allocator', 'hasher'] as const) {
        if (this.failure) break;
        await this.stop(role, deadline);
        // The store is gone: a verify it did not answer never will be.
        if (role === 'store') this.rejectVerifies(new ClosedError('runtime'));
      }
    }
    await this.terminateAll();
    // The store has stopped: no copy is asked for any more, and none is in flight.
    await this.gpu?.close();
    // The store has stopped: what it queued is published, then the streams end.
    await this.hub?.close();
    this.closed = true;
    this.rejectVerifies(this.failure ?? new ClosedError('runtime'));
    // Role views (the host's in external mode) refuse every write from now on.
    closeRoles(this.views.state, OWNER_ROLES);
    if (this.backlogTimer) clearTimeout(this.backlogTimer);
    for (const [, p] of this.pending) p.reject(this.failure ?? new ClosedError('runtime'));
    this.pending.clear();
    this.leaks = this.leakCheck();
    // Everything is released; the caller still learns why the runtime stopped
    // early (a close() that resolved hid a failed backend from a caller that
    // only awaited it).
    if (this.failure !== undefined) throw this.failure;
    if (Date.now() > deadline) throw new TimeoutError('OffloadRuntime.close', timeoutMs);
  }

  private async stop(role: RoleName, deadline: number): Promise<void> {
    const exited = this.exited.get(role);
    if (!this.workers.has(role) || exited === undefined) return;
    this.stopping.add(role);
    Atomics.store(this.views.control, CONTROL_STOP[role as DoorbellName], 1);
    this.views.doorbell(role).ring();
    const ms = Math.max(0, deadline - Date.now());
    let timer: NodeJS.Timeout | undefined;
    let grace: NodeJS.Timeout | undefined;
    // A role that sent its final report has nothing left to do: if a stray
    // handle (a socket a library left open) keeps its thread alive, it is
    // ended after a short grace instead of at the close deadline.
    const reported = new Promise<void>((resolve) => {
      const after = () => (grace = setTimeout(resolve, FINAL_EXIT_GRACE_MS));
      if (this.finals.has(role)) after();
      else this.onFinal.set(role, after);
    });
    await Promise.race([exited, reported, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
    clearTimeout(grace);
    this.onFinal.delete(role);
    await this.workers.get(role)?.terminate();
  }

  private until(done: () => boolean, deadline: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const tick = () => {
        if (done() || Date.now() > deadline) resolve();
        else setTimeout(tick, 2);
      };
      tick();
    });
  }

  private leakCheck(): LeakReport {
    const { state } = this.views;
    let slots = 0;
    for (let s = 0; s < this.config.maxRequests; s += 1) {
      if ((Atomics.load(state.control, state.schedulerWord(s, S_GENERATION)) & 1) === 1) slots += 1;
    }
    // The host's pool: copies are drained, so quarantined blocks can go back first.
    this.external?.pool.releaseUnpinned();
    const alloc = this.external
      ? { inUse: this.external.pool.inUse, quarantined: this.external.pool.quarantined }
      : this.finals.get('allocator');
    // No store ran (offload: false): it cannot have left tier entries or jobs.
    const store = this.options.offload === false ? noStoreFinal : this.finals.get('store');
    return {
      blocksInUse: alloc?.inUse ?? -1,
      blocksQuarantined: alloc?.quarantined ?? -1,
      pinsOutstanding: this.pinsOutstanding(),
      slotsInUse: slots,
      tierEntriesWriting: store?.tierWriting ?? -1,
      tierEntriesReading: store?.tierReading ?? -1,
      jobsInFlight: store?.jobsInFlight ?? -1,
    };
  }
}

const statIndexVerify = STAT_INDEX.verifyMismatches;

/** How long a role may stay alive after its final report before it is terminated. */
const FINAL_EXIT_GRACE_MS = 1_000;

/** The most specific code: the cause's (TransferBackendFailedError) when it has one. */
function failureCode(err: WorkerFailedError): string {
  const code = (err.cause as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code.startsWith('KVOFF_') ? code : err.code;
}

const noStoreFinal: Record<string, number> = { tierWriting: 0, tierReading: 0, jobsInFlight: 0 };

interface PendingVerify {
  resolve: (r: VerifyReport) => void;
  reject: (e: Error) => void;
}

interface PendingReset {
  resolve: () => void;
  reject: (e: Error) => void;
}

/** Every key RuntimeOptions has: start() refuses any other (a typo must not start with a default). */
const RUNTIME_OPTION_KEYS: KnownKeys<RuntimeOptions> = {
  config: true,
  policy: true,
  transferThreads: true,
  transferBackendModule: true,
  transferBackend: true,
  lag: true,
  simulator: true,
  traceSlots: true,
  unsafeSkipPins: true,
  transferDelayMs: true,
  faultInjection: true,
  pendingSubmitsMax: true,
  closeTimeoutMs: true,
  finalWaitMsMax: true,
  transferFailuresMax: true,
  external: true,
  tiers: true,
  offload: true,
  cache: true,
  events: true,
  unsafeTierSwitches: true,
};
const LAG_OPTION_KEYS: KnownKeys<LagOptions> = {
  hasherHashesPerWake: true,
  allocatorPublishDelayMs: true,
  jitterMs: true,
  seed: true,
};
/** The simulator's options are exactly those DEFAULT_ENGINE_OPTIONS gives a value. */
const ENGINE_OPTION_KEYS = Object.fromEntries(
  Object.keys(DEFAULT_ENGINE_OPTIONS).map((k) => [k, true as const]),
) as KnownKeys<EngineOptions>;
const TIERS_OPTION_KEYS: KnownKeys<TiersOptions> = {
  disk: true,
  redis: true,
  secret: true,
  optional: true,
};
const DISK_OPTION_KEYS: KnownKeys<NonNullable<TiersOptions['disk']>> = {
  dir: true,
  bytesMax: true,
  freeBytesMin: true,
  fdatasync: true,
  writesQueuedBytesMax: true,
  openTimeoutMs: true,
};
const REDIS_OPTION_KEYS: KnownKeys<NonNullable<TiersOptions['redis']>> = {
  urls: true,
  timeoutMs: true,
  username: true,
  password: true,
  tls: true,
  insecure: true,
  storesInFlightMax: true,
  storesQueuedBytesMax: true,
};
const REDIS_TLS_OPTION_KEYS: KnownKeys<RedisTlsOptions> = {
  ca: true,
  cert: true,
  key: true,
  servername: true,
};

function refuseUnknownTierKeys(tiers: object): void {
  refuseUnknownKeys(tiers, TIERS_OPTION_KEYS, 'tiers.');
  const { disk, redis } = tiers as TiersOptions;
  if (typeof disk === 'object' && disk !== null)
    refuseUnknownKeys(disk, DISK_OPTION_KEYS, 'tiers.disk.');
  if (typeof redis === 'object' && redis !== null) {
    refuseUnknownKeys(redis, REDIS_OPTION_KEYS, 'tiers.redis.');
    const { tls } = redis;
    if (typeof tls === 'object' && tls !== null) {
      refuseUnknownKeys(tls, REDIS_TLS_OPTION_KEYS, 'tiers.redis.tls.');
    }
  }
}

function validateOptions(o: RuntimeOptions): void {
  if (o.policy !== undefined) parseStorePolicy(o.policy);
  // Checked here, before any worker starts: a bad one used to start every
  // worker and then fail one of them (WorkerFailedError), or, for `external`,
  // any truthy value turned the built-in engine off.
  const flag = (name: string, v: unknown) => {
    if (v !== undefined && typeof v !== 'boolean') {
      throw new InvalidArgumentError(name, 'must be a boolean');
    }
  };
  flag('external', o.external);
  flag('unsafeSkipPins', o.unsafeSkipPins);
  const obj = (name: string, v: unknown) => {
    if (v !== undefined && (typeof v !== 'object' || v === null || Array.isArray(v))) {
      throw new InvalidArgumentError(name, 'must be an object');
    }
  };
  obj('lag', o.lag);
  obj('simulator', o.simulator);
  obj('unsafeTierSwitches', o.unsafeTierSwitches);
  if (o.lag !== undefined) refuseUnknownKeys(o.lag, LAG_OPTION_KEYS, 'lag.');
  if (o.simulator !== undefined) refuseUnknownKeys(o.simulator, ENGINE_OPTION_KEYS, 'simulator.');
  if (o.tiers !== undefined && typeof o.tiers === 'object' && o.tiers !== null) {
    refuseUnknownTierKeys(o.tiers);
  }
  const seed: unknown = o.lag?.seed;
  if (
    seed !== undefined &&
    (typeof seed !== 'number' || !Number.isInteger(seed) || seed < -0x80000000 || seed > 0x7fffffff)
  ) {
    throw new InvalidArgumentError('lag.seed', 'must be an integer in [-2^31, 2^31)');
  }
  const int = (name: string, v: unknown, min: number, max: number) => {
    if (v === undefined) return;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new InvalidArgumentError(name, `must be an integer in [${min}, ${max}]`);
    }
  };
  if (o.transferBackend !== undefined && !TRANSFER_BACKENDS.includes(o.transferBackend)) {
    throw new InvalidArgumentError(
      'transferBackend',
      `must be one of ${TRANSFER_BACKENDS.join(', ')}`,
    );
  }
  if (o.transferBackend === 'webgpu' && o.transferBackendModule !== undefined) {
    throw new InvalidArgumentError(
      'transferBackend',
      "'webgpu' cannot be combined with transferBackendModule",
    );
  }
  if (o.tiers !== undefined) validateTiersOptions(o.tiers);
  if (o.events !== undefined) resolveEventsOptions(o.events);
  validateCacheOptions(o.cache);
  if (o.offload !== undefined && typeof o.offload !== 'boolean') {
    throw new InvalidArgumentError('offload', 'must be a boolean');
  }
  if (o.offload === false) {
    // Each of these needs the store role, which offload: false does not start.
    if (o.external)
      throw new InvalidArgumentError('offload', 'false cannot be combined with external: true');
    if (o.tiers !== undefined)
      throw new InvalidArgumentError('offload', 'false cannot be combined with tiers');
    if (o.events !== undefined)
      throw new InvalidArgumentError(
        'offload',
        'false cannot be combined with events (no tier changes)',
      );
    if (o.transferBackendModule !== undefined) {
      throw new InvalidArgumentError(
        'offload',
        'false cannot be combined with transferBackendModule',
      );
    }
    if (o.simulator?.offload === true || o.simulator?.loadFromTier === true) {
      throw new InvalidArgumentError(
        'offload',
        'false cannot be combined with simulator.offload or simulator.loadFromTier true',
      );
    }
  }
  int('transferThreads', o.transferThreads, 1, 64);
  int('traceSlots', o.traceSlots, 0, 1 << 16);
  int('transferDelayMs', o.transferDelayMs, 0, 10_000);
  int('closeTimeoutMs', o.closeTimeoutMs, 1, 3_600_000);
  int('transferFailuresMax', o.transferFailuresMax, 1, 1 << 20);
  if (
    o.finalWaitMsMax !== undefined &&
    (typeof o.finalWaitMsMax !== 'number' ||
      !(o.finalWaitMsMax >= 0 && o.finalWaitMsMax <= 3_600_000))
  ) {
    throw new InvalidArgumentError('finalWaitMsMax', 'must be a number of ms in [0, 3600000]');
  }
  int('pendingSubmitsMax', o.pendingSubmitsMax, 1, PENDING_SUBMITS_MAX);
  int('lag.hasherHashesPerWake', o.lag?.hasherHashesPerWake, 1, 1 << 20);
  const num = (name: string, v: unknown) => {
    if (v === undefined) return;
    if (typeof v !== 'number' || !(v >= 0 && v <= 10_000)) {
      throw new InvalidArgumentError(name, 'must be a number in [0, 10000]');
    }
  };
  num('lag.allocatorPublishDelayMs', o.lag?.allocatorPublishDelayMs);
  num('lag.jitterMs', o.lag?.jitterMs);
}

/** Names what refused a worker thread when Node says only that access was denied. */
function spawnRefusal(err: unknown): unknown {
  if ((err as { code?: unknown } | null)?.code === 'ERR_ACCESS_DENIED') {
    return new Error(
      "Node's permission model refuses worker threads (run node with --allow-worker)",
      { cause: err },
    );
  }
  return err;
}
