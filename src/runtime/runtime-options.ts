// The options of OffloadRuntime.start(): what each means, the check of every
// one before a worker starts, and what each role worker is given from them.
import { resolveConfig } from '../config.js';
import type { Config, ConfigInput } from '../config.js';
import { InvalidArgumentError } from '../errors.js';
import { LOAD_FAILURE_POLICIES } from '../lookup.js';
import type { LoadFailurePolicy } from '../lookup.js';
import { parseStorePolicy } from '../ready.js';
import type { StorePolicy } from '../ready.js';
import { checkShareable, validateTiersOptions } from '../tier/cascade.js';
import type { TiersOptions } from '../tier/cascade.js';
import type { LowerTierSwitches } from '../tier/lower.js';
import type { RedisTlsOptions } from '../tier/redis-access.js';
import { refuseUnknownKeys } from '../known-keys.js';
import type { KnownKeys } from '../known-keys.js';
import { validateCacheOptions } from '../tier/policy/index.js';
import type { CacheOptions } from '../tier/policy/index.js';
import { resolveEventsOptions } from '../events/types.js';
import type { EventsOptions } from '../events/types.js';
import { backendModuleHref, loadTransferBackendModule } from './backend.js';
import type { RuntimeBuffers } from './buffers.js';
import { DEFAULT_SEED, runtimeConfigInput } from './defaults.js';
import { DEFAULT_ENGINE_OPTIONS, resolveEngineOptions } from './engine-options.js';
import type { EngineOptions } from './engine-options.js';
import { checkLoadableGroups } from './request-rules.js';
import type { FaultInjection, RoleWorkerData } from './role-main.js';
import { TRANSFER_BACKENDS } from './runtime-gpu.js';
import type { TransferBackendName } from './runtime-gpu.js';
import type { GpuThreadSpec } from './webgpu-thread.js';

/** Submits pending at once; beyond this submit() rejects with QueueFullError (bounds every queue behind it). */
export const PENDING_SUBMITS_MAX = 1 << 16;

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
   * With tensor-parallel ranks (config.ranks > 1): how long a store job waits
   * for every rank's acknowledgement before it fails as a whole (its chunks
   * dropped and counted in rankAckTimeouts and chunksTransferFailed), in ms;
   * default RANK_ACK_WAIT_MS_MAX (10,000).
   */
  rankAckWaitMsMax?: number;
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
  /**
   * What a request does when a chunk of its tier hit cannot be loaded (a
   * failed copy, or a level below the host refusing it on its way up), as
   * vLLM's kv_load_failure_policy: 'recompute' (default) keeps the chunks
   * before the first failed one and recomputes from there; 'fail' fails the
   * request with LoadFailedError (submit()'s promise, the external host's
   * lookup() or load()) and serves the others. Counted in stats()
   * (loadFailures, loadFailureTokensRecomputed, requestsFailedByLoad).
   */
  loadFailurePolicy?: LoadFailurePolicy;
}

/**
 * Every check start() makes before it lays out memory or starts a worker
 * (each failure a typed error that changes nothing); resolves to the config.
 */
export async function checkStartOptions(options: RuntimeOptions): Promise<Config> {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  refuseUnknownKeys(options, RUNTIME_OPTION_KEYS, '');
  const config = resolveConfig(runtimeConfigInput(options.config));
  validateRuntimeOptions(options);
  // A shared tier without a named model (or with xxHash keys).
  if (options.tiers !== undefined) checkShareable(options.tiers, config);
  // A bad backend module is refused here, not in a worker.
  if (options.transferBackendModule !== undefined) {
    await loadTransferBackendModule(backendModuleHref(options.transferBackendModule));
  }
  if (!options.external) {
    const engine = resolveEngineOptions(options.simulator ?? {}, config.maxRequests);
    // Only where the built-in engine would load (offload: false loads nothing).
    if (engine.loadFromTier && options.offload !== false) checkLoadableGroups(config);
  }
  return config;
}

/**
 * Every option checked before any worker starts: a bad one used to start
 * every worker and then fail one of them (WorkerFailedError), or, for
 * `external`, any truthy value turned the built-in engine off. Throws
 * InvalidArgumentError (or UnknownPolicyError) naming the option.
 */
function validateRuntimeOptions(o: RuntimeOptions): void {
  if (o.policy !== undefined) parseStorePolicy(o.policy);
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
  checkLagSeed(o.lag);
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
  if (o.loadFailurePolicy !== undefined && !LOAD_FAILURE_POLICIES.includes(o.loadFailurePolicy)) {
    throw new InvalidArgumentError(
      'loadFailurePolicy',
      `must be one of ${LOAD_FAILURE_POLICIES.join(', ')}`,
    );
  }
  if (o.offload !== undefined && typeof o.offload !== 'boolean') {
    throw new InvalidArgumentError('offload', 'must be a boolean');
  }
  if (o.offload === false) checkOffloadOff(o);
  checkInt('transferThreads', o.transferThreads, 1, 64);
  checkInt('traceSlots', o.traceSlots, 0, 1 << 16);
  checkInt('transferDelayMs', o.transferDelayMs, 0, 10_000);
  checkInt('closeTimeoutMs', o.closeTimeoutMs, 1, 3_600_000);
  checkInt('transferFailuresMax', o.transferFailuresMax, 1, 1 << 20);
  if (
    o.finalWaitMsMax !== undefined &&
    (typeof o.finalWaitMsMax !== 'number' ||
      !(o.finalWaitMsMax >= 0 && o.finalWaitMsMax <= 3_600_000))
  ) {
    throw new InvalidArgumentError('finalWaitMsMax', 'must be a number of ms in [0, 3600000]');
  }
  if (
    o.rankAckWaitMsMax !== undefined &&
    (typeof o.rankAckWaitMsMax !== 'number' ||
      !(o.rankAckWaitMsMax >= 0 && o.rankAckWaitMsMax <= 3_600_000))
  ) {
    throw new InvalidArgumentError('rankAckWaitMsMax', 'must be a number of ms in [0, 3600000]');
  }
  // The WebGPU backend copies whole blocks on one device: it has no ranks.
  if (o.transferBackend === 'webgpu' && (o.config?.ranks ?? 1) !== 1) {
    throw new InvalidArgumentError('transferBackend', "'webgpu' copies for one rank: set ranks 1");
  }
  checkInt('pendingSubmitsMax', o.pendingSubmitsMax, 1, PENDING_SUBMITS_MAX);
  checkLag(o.lag);
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
  rankAckWaitMsMax: true,
  transferFailuresMax: true,
  external: true,
  tiers: true,
  offload: true,
  cache: true,
  events: true,
  unsafeTierSwitches: true,
  loadFailurePolicy: true,
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

/** offload: false starts no store: refuses every option that needs one. */
function checkOffloadOff(o: RuntimeOptions): void {
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

function checkLagSeed(lag: LagOptions | undefined): void {
  const seed: unknown = lag?.seed;
  if (
    seed !== undefined &&
    (typeof seed !== 'number' || !Number.isInteger(seed) || seed < -0x80000000 || seed > 0x7fffffff)
  ) {
    throw new InvalidArgumentError('lag.seed', 'must be an integer in [-2^31, 2^31)');
  }
}

/** The lag's counts and delays in range. */
function checkLag(lag: LagOptions | undefined): void {
  checkInt('lag.hasherHashesPerWake', lag?.hasherHashesPerWake, 1, 1 << 20);
  const num = (name: string, v: unknown) => {
    if (v === undefined) return;
    if (typeof v !== 'number' || !(v >= 0 && v <= 10_000)) {
      throw new InvalidArgumentError(name, 'must be a number in [0, 10000]');
    }
  };
  num('lag.allocatorPublishDelayMs', lag?.allocatorPublishDelayMs);
  num('lag.jitterMs', lag?.jitterMs);
}

function checkInt(name: string, v: unknown, min: number, max: number): void {
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidArgumentError(name, `must be an integer in [${min}, ${max}]`);
  }
}

/** What every role worker is given (each adds its role), from the runtime's options. */
export function roleWorkerData(
  config: Config,
  buffers: RuntimeBuffers,
  options: RuntimeOptions,
  gpu: GpuThreadSpec | undefined,
): Omit<RoleWorkerData, 'role'> {
  const lag = options.lag ?? {};
  const seed = lag.seed ?? DEFAULT_SEED;
  return {
    config,
    buffers,
    hasher: {
      hashesPerWake: lag.hasherHashesPerWake ?? 64,
      jitterMs: lag.jitterMs ?? 1,
      seed,
    },
    allocator: {
      publishDelayMs: lag.allocatorPublishDelayMs ?? 1,
      jitterMs: lag.jitterMs ?? 1,
      seed,
      unsafeIgnorePins: options.unsafeSkipPins ?? false,
      awaitDrained: options.offload !== false,
    },
    store: {
      transferThreads: options.transferThreads ?? 1,
      unsafeSkipPins: options.unsafeSkipPins ?? false,
      transferDelayMs: options.transferDelayMs ?? 0,
      traceRequests: options.traceSlots ?? 0,
      loadFailurePolicy: options.loadFailurePolicy ?? 'recompute',
      ...(options.cache ? { cache: options.cache } : {}),
      ...(options.finalWaitMsMax !== undefined ? { finalWaitMsMax: options.finalWaitMsMax } : {}),
      ...(options.rankAckWaitMsMax !== undefined
        ? { rankAckWaitMsMax: options.rankAckWaitMsMax }
        : {}),
      ...(options.transferFailuresMax !== undefined
        ? { transferFailuresMax: options.transferFailuresMax }
        : {}),
      ...(options.transferBackendModule !== undefined
        ? { transferBackendModule: backendModuleHref(options.transferBackendModule) }
        : {}),
    },
    simulator: {
      seed,
      ...options.simulator,
      // No store answers lookups or stores chunks: the engine asks for neither.
      ...(options.offload === false ? { offload: false, loadFromTier: false } : {}),
    },
    policy: options.policy ?? 'ready-prefix',
    ...(options.tiers ? { tiers: options.tiers } : {}),
    ...(options.unsafeTierSwitches ? { tierSwitches: options.unsafeTierSwitches } : {}),
    ...(options.faultInjection ? { fault: options.faultInjection } : {}),
    ...(gpu ? { gpu } : {}),
  };
}
