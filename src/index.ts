// kvoff's public entry: what an embedder uses. The fuzzer, the engine
// simulator and the core's internals are in `kvoff/testing` (src/testing.ts).

// Errors and configuration.
export {
  KvoffError,
  ConfigError,
  InvalidArgumentError,
  StaleHandleError,
  SlotsExhaustedError,
  RequestCapacityError,
  IllegalTransitionError,
  UnknownPolicyError,
  LegacyAssertionError,
  WorkerFailedError,
  ClosedError,
  TimeoutError,
  QueueFullError,
  BlocksSettledError,
  RoleClaimedError,
  TransferBackendFailedError,
  TierUnavailableError,
  EventsUnavailableError,
  TraceFormatError,
  WebGpuUnavailableError,
  NamespaceRequiredError,
  KeyHashNotShareableError,
  SharedResetFailedError,
  LoadFailedError,
} from './errors.js';
export type { KvoffErrorCode, WebGpuMissing } from './errors.js';
export { resolveConfig, CONFIG_DEFAULTS, CONFIG_LIMITS } from './config.js';
export type { Config, ConfigInput, GroupConfig, GroupInput, GroupKind } from './config.js';

// The threaded runtime.
export { OffloadRuntime } from './runtime/runtime.js';
export type {
  RuntimeOptions,
  LagOptions,
  RequestInput,
  RequestSummary,
  RuntimeStats,
  VerifyReport,
  JobEvent,
  LeakReport,
  RequestTrace,
  TracePass,
  ExternalRuntime,
} from './runtime/runtime.js';
export { DEFAULT_RUNTIME_CONFIG, defaultWorkload } from './runtime/defaults.js';
export type { WorkloadOptions } from './runtime/defaults.js';
export type { EngineOptions } from './runtime/engine-options.js';
export type { RuntimeMemory, WorkerMemory, MemoryRole } from './runtime/memory.js';

// The external host: the engine is the embedder's, kvoff runs the store path.
export { ExternalHost, attachExternal } from './runtime/external.js';
export type { ExternalRoles } from './runtime/external.js';
export type {
  ExternalLoadResult,
  ExternalLookupAnswer,
  ExternalLookupOptions,
} from './runtime/external-load.js';
export type { LookupLimits } from './runtime/lookup-record.js';
export type { RuntimeBuffers } from './runtime/buffers.js';
export type { GpuBlockPool } from './gpu-pool.js';

// Transfer backends: the copy between the GPU and tier arenas.
export { InlineTransferBackend, PiscinaTransferBackend } from './runtime/backend.js';
export type {
  PiscinaBackendOptions,
  TransferBackend,
  TransferBackendModule,
  TransferCompletion,
} from './runtime/backend.js';
export type { Doorbell } from './runtime/doorbell.js';
export { runTransferTask, attachArenas, TASK_STORE, TASK_LOAD } from './runtime/transfer.js';
export type { TransferArenas, AttachedArenas } from './runtime/transfer.js';

// The one-thread facade: every role stepped by the caller.
export { LocalOffload } from './local.js';
export type { GroupProgress, LocalOffloadOptions } from './local.js';
export type { RequestHandle } from './roles/handle.js';
export type { OpenRequest, SchedulerRole } from './roles/scheduler.js';
export type { HasherRole } from './roles/hasher.js';
export type { AllocatorRole } from './roles/allocator.js';
export type { SharedState } from './state.js';
export type {
  StorePlanner,
  PlannerOptions,
  PlannerObserver,
  PlannerCounters,
  ChunkOutcome,
  PlanPoint,
  PlanPointListener,
} from './planner.js';
export type { StoreJob } from './job.js';
export type { ChunkCopy } from './copy.js';
export type { DeferReason, LoadJob, LookupAnswer, LookupOptions } from './load-path.js';

// Hashing, identity and the offload keys of a prompt.
export { loadHashing, promptKeys, KeyChain } from './hashing.js';
export type { Hashing } from './hashing.js';
export {
  CACHE_SALT_BYTES_MAX,
  NAMESPACE_FIELD_BYTES_MAX,
  KEY_HASHES,
  requestRoot,
  keyWord,
} from './identity.js';
export type { KeyHash, Namespace, NamespaceInput } from './identity.js';

// Policies: the store rule (the ready prefix) and the lookup across levels.
export { STORE_POLICIES, parseStorePolicy, storeWindow, readyPrefix } from './ready.js';
export type { StorePolicy, StoreWindow, RequestFacts } from './ready.js';
export { DEFER, RETRY, asksAgain, combineLevels, lookupHitTokens, loadPlan } from './lookup.js';
export type {
  ChunkState,
  ChunkStateOf,
  CursorPolicy,
  GroupLoad,
  LookupGroup,
  LookupRequest,
  LookupResult,
} from './lookup.js';

// Tiers: the host tier and the levels below it.
export { HostTier } from './tier/host-tier.js';
export type {
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
  LookupState,
} from './tier/types.js';
export { TierCascade, DISK_BYTES_DEFAULT } from './tier/cascade.js';
export type { TiersOptions } from './tier/cascade.js';
export { DiskTier } from './tier/disk-tier.js';
export type { DiskTierOptions } from './tier/disk-tier.js';
export type { RedisTier, RedisTierOptions } from './tier/redis-tier.js';
export { TIER_NAMES, TIER_COUNTER_FIELDS } from './tier/lower.js';
export type { LowerTier, TierName, TierCounters, TierStoreSample } from './tier/lower.js';
export type { LowerTierFlags, LowerTierReport, PerTierCounters } from './tier/tier-stats.js';

// WebGPU: an engine that holds its KV in WebGPU buffers serves kvoff's copies on its device's thread.
export { WebGpuCopyServer } from './runtime/webgpu-host.js';
export type { WebGpuKvBuffers } from './runtime/webgpu-host.js';
export type { GpuRings, GpuCopyReport } from './runtime/webgpu-loop.js';
export type { WebGpuAdapterInfo } from './runtime/webgpu-device.js';
export type { TransferBackendName } from './runtime/runtime-gpu.js';

// KV events: vLLM's event model, from every tier change.
export { KvEventStream } from './events/stream.js';
export type {
  KvEvent,
  KvEventBatch,
  BlockStored,
  BlockRemoved,
  AllBlocksCleared,
  EventsOptions,
  EventWire,
  Medium,
} from './events/types.js';
export type { EventStats } from './events/hub.js';
export type { LookupSample } from './runtime/lookup-timing.js';

// The HTTP server.
export { KvoffServer, SERVE_DEFAULTS } from './serve/server.js';
export type { ServeOptions, ServeStats, DrainResult } from './serve/server.js';
export type { EmbeddableRuntime } from './serve/runtime-api.js';

// Request traces (Mooncake's shape) and the host tier's cache policies.
export { CACHE_POLICIES, createCachePolicy, parseCachePolicy } from './tier/policy/index.js';
export type {
  CacheOptions,
  CachePolicy,
  CachePolicyName,
  PolicyEntry,
} from './tier/policy/index.js';
export { MOONCAKE_BLOCK_TOKENS, checkTraceChunk, parseTrace, readTrace } from './trace/trace.js';
export type { Trace, TraceFigures, TraceReadOptions, TraceRequest } from './trace/trace.js';
export { chunkKeys, promptTokens } from './trace/tokens.js';
export { replayCache } from './trace/cache-replay.js';
export type { CacheReplayOptions, CacheReplayResult } from './trace/cache-replay.js';
export { replayThreaded, traceRuntimeConfig } from './trace/threaded-replay.js';
export type {
  MemorySample,
  ThreadedReplayOptions,
  ThreadedReplayResult,
  TraceGeometry,
} from './trace/threaded-replay.js';
