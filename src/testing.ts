// `kvoff/testing`: the fuzzer, the engine simulator and the core's parts, for
// harnesses and regression tests outside this repository. Less stable than
// the main entry: these follow the code they test.

// The race fuzzer: schedules, replay tokens, shrinking.
export { fuzz, describeFailure } from './fuzz/run.js';
export type { FuzzOptions, FuzzReport, FailureReport } from './fuzz/run.js';
export { runSchedule, scenarioOf } from './fuzz/schedule.js';
export type { ScheduleResult } from './fuzz/schedule.js';
export { World } from './fuzz/world.js';
export type { WorldOptions, WorldOutcome } from './fuzz/world.js';
export { INVARIANTS } from './fuzz/oracle.js';
export type { InvariantName, Violation } from './fuzz/oracle.js';
export { ACTORS, scenarioFromSeed, formatScenario } from './fuzz/scenario.js';
export type { Scenario, ScenarioEvent, RequestSpec } from './fuzz/scenario.js';
export {
  STRATEGIES,
  parseStrategy,
  RandomStrategy,
  PctStrategy,
  DecisionListStrategy,
} from './fuzz/strategy.js';
export type { Strategy, StrategyName } from './fuzz/strategy.js';
export { encodeReplayToken, decodeReplayToken } from './fuzz/token.js';
export type { ReplaySpec } from './fuzz/token.js';
export { shrinkFailure, ddmin } from './fuzz/shrink.js';
export { Prng } from './prng.js';

// The engine simulator that drives the threaded runtime.
export { EngineSimulator } from './runtime/engine-sim.js';
export { DEFAULT_ENGINE_OPTIONS } from './runtime/engine-options.js';
export type { EngineOptions } from './runtime/engine-options.js';

// The core's roles over shared state, to step by hand.
export { Status, STATUS_NAMES, FIELDS, ARRAYS, GROUPS_MAX } from './layout.js';
export type { Role, FieldSpec, SharedBuffers, StatusCode } from './layout.js';
export { SharedState } from './state.js';
export { SchedulerRole } from './roles/scheduler.js';
export { HasherRole } from './roles/hasher.js';
export { AllocatorRole } from './roles/allocator.js';
export { StoreRole, RequestSnapshot } from './roles/store.js';
export { StorePlanner } from './planner.js';
export { GpuBlockPool } from './gpu-pool.js';
export { expandBlock, blockMatches } from './bytes.js';
