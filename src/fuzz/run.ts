// The fuzz loop over consecutive seeds: it stops at the first violation,
// shrinks it and reports how to replay it (one schedule: schedule.ts).
import type { Hashing } from '../hashing.js';
import { loadHashing } from '../hashing.js';
import { InvalidArgumentError } from '../errors.js';
import { parseStorePolicy } from '../ready.js';
import type { StorePolicy } from '../ready.js';
import type { InvariantName, Violation } from './oracle.js';
import type { Scenario } from './scenario.js';
import type { RuntimeSwitch } from './switches.js';
import type { RuntimeScenario } from './runtime-scenario.js';
import { runSchedule } from './schedule.js';
import type { ScheduleResult } from './schedule.js';
import { shrinkFailure } from './shrink.js';
import { parseStrategy } from './strategy.js';
import type { StrategyName } from './strategy.js';
import { encodeReplayToken } from './token.js';
import type { FuzzTarget, ReplaySpec } from './token.js';
import type { TraceLine } from './trace.js';

export interface FuzzOptions {
  readonly policy: StorePolicy;
  readonly strategy: StrategyName;
  readonly pins: boolean;
  /** Schedule i runs with seed (seed + i) mod 2^32. */
  readonly seed: number;
  /** Stop after this many schedules ... */
  readonly schedules?: number;
  /** ... or after this many seconds (whichever comes first). */
  readonly seconds?: number;
  /** Watch only these invariants; all when absent. */
  readonly watch?: readonly InvariantName[];
  /** False: the planner skips its snapshot re-validation (the unsafe variant). */
  readonly revalidate?: boolean;
  /** What the schedules run: the roles world (default) or the runtime's loop classes. */
  readonly target?: FuzzTarget;
  /** Runtime test-only switches (target runtime). */
  readonly switches?: readonly RuntimeSwitch[];
  /** False: the end-of-request protocol is off (the unsafe variant). */
  readonly settle?: boolean;
  /** Go on after a violation and count them all (the first is the one reported); default false. */
  readonly keepGoing?: boolean;
  /** Shrink the first failure (default true). */
  readonly shrink?: boolean;
  /** Called every few schedules with the count so far. */
  readonly onProgress?: (schedules: number, elapsedMs: number) => void;
  /** Stop early (SIGINT/SIGTERM): checked every few schedules; the report says interrupted. */
  readonly signal?: AbortSignal;
}

export interface FailureReport {
  readonly seed: number;
  readonly invariant: string;
  readonly message: string;
  readonly traceLength: number;
  readonly traceHash: string;
  readonly replayToken: string;
  readonly trace: readonly TraceLine[];
  readonly shrunkLength: number;
  readonly shrunkHash: string;
  /**
   * The violation's message in the shrunk schedule: its request ids and
   * figures are those of the shrunk trace (`message` is the full trace's,
   * whose request ids differ once the shrinker dropped events).
   */
  readonly shrunkMessage: string;
  readonly shrunkToken: string;
  readonly shrunkTrace: readonly TraceLine[];
  readonly shrunkScenario: Scenario | RuntimeScenario;
}

export interface FuzzReport {
  readonly target?: FuzzTarget;
  readonly switches?: readonly RuntimeSwitch[];
  readonly policy: StorePolicy;
  readonly strategy: StrategyName;
  readonly pins: boolean;
  /** False when the end-of-request protocol was off (the unsafe variant). */
  readonly settle?: boolean;
  readonly watch?: readonly InvariantName[];
  readonly baseSeed: number;
  readonly schedules: number;
  /** Schedules that violated an invariant (at most 1 unless keepGoing). */
  readonly violations: number;
  readonly violationsByInvariant: Readonly<Record<string, number>>;
  readonly steps: number;
  readonly jobs: number;
  readonly elapsedMs: number;
  readonly schedulesPerSecond: number;
  /** True when `signal` stopped the campaign before its budget. */
  readonly interrupted?: boolean;
  readonly first?: FailureReport;
}

/** Schedules between progress callbacks and clock reads. */
const PROGRESS_EVERY = 64;
/** Upper bound on schedules in one fuzz call when only seconds are given. */
const FUZZ_SCHEDULES_MAX = 1e12;

export async function fuzz(options: FuzzOptions): Promise<FuzzReport> {
  checkFuzzOptions(options);
  const hashing = await loadHashing();
  const limit = options.schedules ?? FUZZ_SCHEDULES_MAX;
  const deadline = options.seconds !== undefined ? options.seconds * 1000 : Infinity;
  const t0 = performance.now();
  let schedules = 0;
  let steps = 0;
  let jobs = 0;
  let failed: ScheduleResult | undefined;
  let violations = 0;
  const byInvariant: Record<string, number> = {};
  while (schedules < limit) {
    const seed = (options.seed + schedules) >>> 0;
    const result = runSchedule(hashing, {
      policy: options.policy,
      strategy: options.strategy,
      pins: options.pins,
      seed,
      ...(options.watch !== undefined ? { watch: options.watch } : {}),
      ...(options.revalidate === false ? { revalidate: false } : {}),
      ...(options.target === 'runtime' ? { target: 'runtime' as const } : {}),
      ...(options.switches !== undefined && options.switches.length > 0
        ? { switches: options.switches }
        : {}),
      ...(options.settle === false ? { settle: false } : {}),
    });
    schedules += 1;
    steps += result.steps;
    jobs += result.jobs;
    if (result.violation !== undefined) {
      violations += 1;
      const name = result.violation.invariant;
      byInvariant[name] = (byInvariant[name] ?? 0) + 1;
      failed ??= result;
      if (!options.keepGoing) break;
    }
    if (schedules % PROGRESS_EVERY === 0) {
      const elapsedMs = performance.now() - t0;
      options.onProgress?.(schedules, elapsedMs);
      if (elapsedMs >= deadline) break;
      // Let a signal handler run (the loop is otherwise synchronous), then honour it.
      if (options.signal !== undefined) await new Promise<void>((r) => setImmediate(r));
    }
    if (options.signal?.aborted) break;
  }
  const elapsedMs = performance.now() - t0;
  options.onProgress?.(schedules, elapsedMs);
  const report: FuzzReport = {
    ...(options.target === 'runtime' ? { target: 'runtime' as const } : {}),
    ...(options.switches !== undefined && options.switches.length > 0
      ? { switches: options.switches }
      : {}),
    policy: options.policy,
    strategy: options.strategy,
    pins: options.pins,
    ...(options.settle === false ? { settle: false } : {}),
    ...(options.watch !== undefined ? { watch: options.watch } : {}),
    baseSeed: options.seed,
    schedules,
    violations,
    violationsByInvariant: byInvariant,
    steps,
    jobs,
    elapsedMs,
    schedulesPerSecond: elapsedMs > 0 ? (schedules * 1000) / elapsedMs : 0,
    ...(options.signal?.aborted ? { interrupted: true } : {}),
  };
  if (failed === undefined) return report;
  return { ...report, first: describeFailure(hashing, failed.spec, options.shrink ?? true) };
}

/** Replays a failing spec with a recorded trace, shrinks it, and names both replays. */
export function describeFailure(hashing: Hashing, spec: ReplaySpec, shrink = true): FailureReport {
  const full = runSchedule(hashing, spec, true);
  const violation = full.violation as Violation;
  const shrunkSpec = shrink && violation ? shrinkFailure(hashing, full) : spec;
  const shrunk = runSchedule(hashing, shrunkSpec, true);
  return {
    seed: spec.seed,
    invariant: violation?.invariant ?? 'none',
    message: violation?.message ?? 'no violation on replay',
    traceLength: full.steps,
    traceHash: full.traceHash,
    replayToken: encodeReplayToken(spec),
    trace: full.lines,
    shrunkLength: shrunk.steps,
    shrunkHash: shrunk.traceHash,
    shrunkMessage: shrunk.violation?.message ?? 'no violation on replay',
    shrunkToken: encodeReplayToken(shrunkSpec),
    shrunkTrace: shrunk.lines,
    shrunkScenario: shrunk.scenario,
  };
}

/**
 * The budget and the names a fuzz() caller gives, checked before anything
 * runs: `seconds: NaN` compared false with every elapsed time, so the loop
 * ran to FUZZ_SCHEDULES_MAX schedules (a hang), and a bad name failed deep
 * inside the first schedule. Throws InvalidArgumentError or UnknownPolicyError.
 */
function checkFuzzOptions(o: FuzzOptions): void {
  if (typeof o !== 'object' || o === null) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  parseStorePolicy(o.policy);
  parseStrategy(o.strategy);
  if (typeof o.pins !== 'boolean') throw new InvalidArgumentError('pins', 'must be a boolean');
  if (typeof o.seed !== 'number' || !Number.isSafeInteger(o.seed) || o.seed < 0) {
    throw new InvalidArgumentError('seed', 'must be a non-negative safe integer');
  }
  const s = o.schedules;
  if (
    s !== undefined &&
    (typeof s !== 'number' || !Number.isInteger(s) || s < 0 || s > FUZZ_SCHEDULES_MAX)
  ) {
    throw new InvalidArgumentError('schedules', `must be an integer in [0, ${FUZZ_SCHEDULES_MAX}]`);
  }
  const t = o.seconds;
  if (t !== undefined && (typeof t !== 'number' || !(t >= 0) || !Number.isFinite(t))) {
    throw new InvalidArgumentError('seconds', 'must be a finite number of seconds, at least 0');
  }
}
