// Public API of kvoff.
export * from './errors.js';
export * from './config.js';
export {
  Status,
  STATUS_NAMES,
  FIELDS,
  ARRAYS,
  GROUPS_MAX,
  SNAPSHOT_RETRIES_MAX,
  NO_CAP,
} from './layout.js';
export type { Role, FieldSpec, SharedBuffers, StatusCode } from './layout.js';
export { SharedState } from './state.js';
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
export * from './ready.js';
export type { RequestHandle } from './roles/handle.js';
export { SchedulerRole } from './roles/scheduler.js';
export type { OpenRequest } from './roles/scheduler.js';
export { HasherRole } from './roles/hasher.js';
export { AllocatorRole } from './roles/allocator.js';
export { StoreRole, RequestSnapshot } from './roles/store.js';
export { StorePlanner, FINAL_STORE_ATTEMPTS_MAX } from './planner.js';
export type { PlannerCounters, PlannerOptions } from './planner.js';
export type { StoreJob, StoreChunk } from './job.js';
export { HostTier } from './tier/host-tier.js';
export type {
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
  LookupState,
} from './tier/types.js';
export { GpuBlockPool } from './gpu-pool.js';
export { expandBlock, blockMatches } from './bytes.js';
export { LocalOffload } from './local.js';
export type { GroupProgress, LocalOffloadOptions } from './local.js';
export type { PlanPoint, PlanPointListener } from './planner.js';
export { fuzz, runSchedule, describeFailure, scenarioOf } from './sim/run.js';
export type { FuzzOptions, FuzzReport, FailureReport, ScheduleResult } from './sim/run.js';
export { World } from './sim/world.js';
export type { WorldOptions, WorldOutcome } from './sim/world.js';
export { INVARIANTS } from './sim/oracle.js';
export type { InvariantName, Violation } from './sim/oracle.js';
export { ACTORS, scenarioFromSeed, formatScenario } from './sim/scenario.js';
export type { Scenario, ScenarioEvent, RequestSpec } from './sim/scenario.js';
export {
  STRATEGIES,
  parseStrategy,
  RandomStrategy,
  PctStrategy,
  DecisionListStrategy,
} from './sim/strategy.js';
export type { Strategy, StrategyName } from './sim/strategy.js';
export { encodeReplayToken, decodeReplayToken } from './sim/token.js';
export type { ReplaySpec } from './sim/token.js';
export { shrinkFailure, ddmin } from './sim/shrink.js';
export { Prng } from './sim/prng.js';
export { OffloadRuntime } from './runtime/runtime.js';
export type {
  RuntimeOptions,
  LagOptions,
  SimRequest,
  RequestSummary,
  RuntimeStats,
  VerifyReport,
  JobEvent,
  LeakReport,
  RequestTrace,
  TracePass,
} from './runtime/runtime.js';
export { DEFAULT_RUNTIME_CONFIG, defaultWorkload } from './runtime/defaults.js';
export type { WorkloadOptions } from './runtime/defaults.js';
export { DEFAULT_ENGINE_OPTIONS, EngineSimulator } from './runtime/engine-sim.js';
export type { EngineOptions } from './runtime/engine-sim.js';
export { InlineTransferBackend, PiscinaTransferBackend } from './runtime/backend.js';
export type { TransferBackend, TransferCompletion } from './runtime/backend.js';
export type { PlannerObserver, ChunkOutcome } from './planner.js';
export { ExternalHost, attachExternal } from './runtime/external.js';
export type { ExternalRoles } from './runtime/external.js';
export { KvoffServer, SERVE_DEFAULTS } from './serve/server.js';
export type { ServeOptions, ServeStats, DrainResult } from './serve/server.js';
export type { EmbeddableRuntime } from './serve/runtime-api.js';
export { renderReport } from './report/render.js';
export type {
  ReportData,
  ReportPass,
  ReportRequestTrace,
  ReportSummaryRow,
} from './report/data.js';
export type { ExternalRuntime } from './runtime/runtime.js';
export { runTransferTask, attachArenas, TASK_STORE, TASK_LOAD } from './runtime/transfer.js';
export type { TransferArenas, AttachedArenas } from './runtime/transfer.js';
export type { TransferBackendModule } from './runtime/backend.js';
export {
  DEFER,
  combineLevels,
  loadPlan,
  lookupHitTokens,
  lookupOrder,
  maximalPrefix,
  slidingWindow,
  touchRanges,
} from './lookup.js';
export type {
  ChunkRange,
  ChunkState,
  ChunkStateOf,
  CursorPolicy,
  GroupLoad,
  LookupGroup,
  LookupRequest,
  LookupResult,
} from './lookup.js';
export type { LoadChunk, LoadJob, LookupAnswer, LookupOptions } from './load-path.js';
export type { ExternalLoadResult, ExternalLookupAnswer } from './runtime/external-load.js';
export { TierCascade, DISK_BYTES_DEFAULT } from './tier/cascade.js';
export type { TiersOptions } from './tier/cascade.js';
export { DiskTier } from './tier/disk-tier.js';
export type { DiskTierOptions } from './tier/disk-tier.js';
export type { RedisTier, RedisTierOptions } from './tier/redis-tier.js';
export { TIER_NAMES, TIER_COUNTER_FIELDS } from './tier/lower.js';
export type { LowerTier, TierName, TierCounters, TierStoreSample } from './tier/lower.js';
export type { PerTierCounters } from './tier/tier-stats.js';
export { checkValue, encodeValue, tierScope } from './tier/value.js';
export type { ExternalLookupOptions } from './runtime/external-load.js';
export type { LookupLimits } from './runtime/lookup-record.js';
