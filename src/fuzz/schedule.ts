// Running one schedule exactly as a replay spec names it: from its seed, less
// the events shrinking dropped, under its strategy or its decision list.
import type { Hashing } from '../hashing.js';
import { estimateSteps, requestSpecs, scenarioFromSeed } from './scenario.js';
import type { Scenario } from './scenario.js';
import { RuntimeWorld } from './runtime-world.js';
import { estimateRuntimeSteps, runtimeScenarioFromSeed } from './runtime-scenario.js';
import type { RuntimeScenario } from './runtime-scenario.js';
import { DecisionListStrategy, makeStrategy } from './strategy.js';
import type { ReplaySpec } from './token.js';
import { World } from './world.js';
import type { WorldOutcome } from './world.js';

export interface ScheduleResult extends WorldOutcome {
  readonly spec: ReplaySpec;
  readonly scenario: Scenario | RuntimeScenario;
}

/** The scenario a replay spec names: the seed's, less the events shrinking dropped. */
export function scenarioOf(spec: ReplaySpec): Scenario {
  const full = scenarioFromSeed(spec.seed);
  if (spec.events === undefined) return full;
  const keep = new Set(spec.events);
  return { ...full, events: full.events.filter((_, i) => keep.has(i)) };
}

/** The --target runtime scenario a replay spec names. */
function runtimeScenarioOf(spec: ReplaySpec): RuntimeScenario {
  const full = runtimeScenarioFromSeed(spec.seed);
  if (spec.events === undefined) return full;
  const keep = new Set(spec.events);
  return { ...full, events: full.events.filter((_, i) => keep.has(i)) };
}

/** Runs one schedule exactly as `spec` names it. */
export function runSchedule(hashing: Hashing, spec: ReplaySpec, record = false): ScheduleResult {
  if (spec.target === 'runtime') return runRuntimeSchedule(hashing, spec, record);
  const scenario = scenarioOf(spec);
  const strategy =
    spec.decisions !== undefined
      ? new DecisionListStrategy(spec.decisions)
      : makeStrategy(spec.strategy, spec.seed, estimateSteps(requestSpecs(scenario)));
  const world = new World(scenario, {
    policy: spec.policy,
    pins: spec.pins,
    hashing,
    strategy,
    record,
    ...(spec.watch !== undefined ? { watch: new Set(spec.watch) } : {}),
    ...(spec.revalidate === false ? { revalidate: false } : {}),
    ...(spec.settle === false ? { settle: false } : {}),
    ...(spec.switches !== undefined ? { switches: spec.switches } : {}),
  });
  return { ...world.run(), spec, scenario };
}

function runRuntimeSchedule(hashing: Hashing, spec: ReplaySpec, record: boolean): ScheduleResult {
  const scenario = runtimeScenarioOf(spec);
  const strategy =
    spec.decisions !== undefined
      ? new DecisionListStrategy(spec.decisions)
      : makeStrategy(spec.strategy, spec.seed, estimateRuntimeSteps(scenario));
  const world = new RuntimeWorld(scenario, {
    policy: spec.policy,
    pins: spec.pins,
    hashing,
    strategy,
    record,
    ...(spec.switches !== undefined ? { switches: spec.switches } : {}),
    ...(spec.settle === false ? { settle: false } : {}),
    ...(spec.revalidate === false ? { revalidate: false } : {}),
    ...(spec.watch !== undefined ? { watch: new Set(spec.watch) } : {}),
  });
  return { ...world.run(), spec, scenario };
}
