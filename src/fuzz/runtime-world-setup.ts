// The runtime fuzz target's set-up: the runtime's shared buffers for a
// scenario and the role loop objects over them (the engine simulator, hasher,
// allocator and store loops the role workers run), the stepped transfer
// backend with the scenario's failing copies, the rank acknowledgement relay
// with its late and lost acknowledgements, main's bookkeeping and the checks
// beside the chunk ledger's. RuntimeWorld (runtime-world.ts) drives them.
import { resolveConfig } from '../config.js';
import type { Config } from '../config.js';
import type { Hashing } from '../hashing.js';
import type { PlanPoint } from '../planner.js';
import type { StorePolicy } from '../ready.js';
import { AllocatorLoop } from '../runtime/allocator-loop.js';
import { RuntimeViews, createRuntimeBuffers } from '../runtime/buffers.js';
import type { Doorbell } from '../runtime/doorbell.js';
import { EngineSimulator } from '../runtime/engine-sim.js';
import type { EngineSummary } from '../runtime/engine-request.js';
import { HasherLoop } from '../runtime/hasher-loop.js';
import { SubmitQueue } from '../runtime/submit-queue.js';
import { Prng } from '../prng.js';
import { ringOthers } from '../runtime/role-loop.js';
import { StoreLoop } from '../runtime/store-loop.js';
import type { DrainedRequest } from '../runtime/store-loop.js';
import type { RequestSnapshot } from '../roles/store.js';
import type { InvariantName } from './oracle.js';
import { scenarioRingWords } from './runtime-scenario.js';
import type { RuntimeScenario } from './runtime-scenario.js';
import { ACTORS, ALLOCATOR, HASHER, SCHEDULER, STORE } from './scenario.js';
import { RuntimeChecks } from './runtime-checks.js';
import { RuntimeMainThread } from './runtime-main.js';
import { StepTransferBackend } from './step-backend.js';
import { RankAckRelay } from './rank-acks.js';
import type { AckFault } from './rank-acks.js';
import type { Strategy } from './strategy.js';
import { switchOptions } from './switches.js';
import type { RuntimeSwitch } from './switches.js';

export interface RuntimeWorldOptions {
  readonly policy: StorePolicy;
  /** False: the store does not pin and the allocator's pool ignores pins (reuse mid-copy). */
  readonly pins: boolean;
  readonly switches?: readonly RuntimeSwitch[];
  /** False: the planner skips its snapshot re-validation (StoreLoopOptions.unsafeSkipRevalidate). */
  readonly revalidate?: boolean;
  /** False: the end-of-request protocol is off (StoreLoopOptions.unsafeSkipSettle). */
  readonly settle?: boolean;
  readonly hashing: Hashing;
  readonly strategy: Strategy;
  readonly record?: boolean;
  readonly watch?: ReadonlySet<InvariantName>;
  /** Virtual ms past which the schedule hangs; default runtimeHangAfterMs(scenario). */
  readonly hangAfterMs?: number;
}

/** Roles with a doorbell (the transfer pool has none). */
export const BELL_ROLES = [SCHEDULER, HASHER, ALLOCATOR, STORE] as const;

/** What the set-up's objects call back into the driver. */
export interface RuntimeWorldHooks {
  /** The virtual clock, in ms. */
  now(): number;
  ended(summary: EngineSummary): void;
  drained(d: DrainedRequest): void;
  planPoint(point: PlanPoint, snap: Readonly<RequestSnapshot>): void;
  /** Raises a violation from inside a step. */
  flag(inv: InvariantName, message: string): void;
}

/** A stall of one role: not runnable from fromMs to toMs (virtual). */
export interface RoleStall {
  readonly actor: number;
  readonly fromMs: number;
  readonly toMs: number;
}

/** A role's wait on the virtual clock (RuntimeWorld carries it out). */
export interface RolePark {
  /** The doorbell value read before the step that did nothing; undefined: runnable. */
  seen: number | undefined;
  untilMs: number;
  /** Not runnable before this (the hasher's lag pause, the store's drain timer). */
  busyUntilMs: number;
  stopped: boolean;
}

/** Everything a RuntimeWorld drives, built from its scenario. */
export interface RuntimeWorldParts {
  readonly config: Config;
  readonly views: RuntimeViews;
  readonly bells: Doorbell[];
  readonly engine: EngineSimulator;
  readonly hasher: HasherLoop;
  readonly allocator: AllocatorLoop;
  readonly store: StoreLoop;
  readonly backend: StepTransferBackend;
  readonly acks: RankAckRelay;
  readonly checks: RuntimeChecks;
  readonly main: RuntimeMainThread;
  /** Which of the oldest queued copies a transfer step runs (the pool's threads race). */
  readonly transferRandom: Prng;
  readonly stalls: RoleStall[];
  /** Per actor: runnable, parked or paused, stopped (all runnable at first). */
  readonly roles: RolePark[];
  /** Some store copy of the scenario fails. */
  readonly transferFaults: boolean;
  readonly draftRewrite: boolean;
}

/** The scenario's failing copies and late or lost rank acknowledgements, by task. */
function transferFaultsOf(scenario: RuntimeScenario): {
  failing: Set<number>;
  ackFaults: Map<number, AckFault>;
} {
  const failing = new Set<number>();
  const ackFaults = new Map<number, AckFault>();
  for (const e of scenario.events) {
    if (e.kind === 'transfer-fail') failing.add(e.task);
    else if (e.kind === 'ack-late') ackFaults.set(e.task, { kind: 'late', forMs: e.forMs });
    else if (e.kind === 'ack-lost') ackFaults.set(e.task, { kind: 'lost' });
  }
  return { failing, ackFaults };
}

/** The store loop over the relay, its hooks calling the checks and the driver. */
function storeLoop(
  scenario: RuntimeScenario,
  options: RuntimeWorldOptions,
  views: RuntimeViews,
  acks: RankAckRelay,
  checks: RuntimeChecks,
  hooks: RuntimeWorldHooks,
): StoreLoop {
  return new StoreLoop(
    views,
    acks,
    { jobs: () => {}, drained: (r) => hooks.drained(r) },
    {
      policy: options.policy,
      // The final wait runs on the virtual clock, as every other wait here.
      now: () => hooks.now(),
      ...(scenario.rankAckWaitMsMax !== undefined
        ? { rankAckWaitMsMax: scenario.rankAckWaitMsMax }
        : {}),
      unsafeSkipPins: !options.pins,
      ...(options.settle === false ? { unsafeSkipSettle: true } : {}),
      ...(options.revalidate === false ? { unsafeSkipRevalidate: true } : {}),
      ...switchOptions([...(options.switches ?? [])], 'StoreLoopOptions'),
      onPlanPoint: (point, snap) => hooks.planPoint(point, snap),
      onLookupAnswered: (a) =>
        checks.lookup(a, options.switches?.includes('load-while-writing') === true),
      onCursorMoved: (snap, group, from) => checks.cursorMove(snap, group, from),
    },
  );
}

export function buildRuntimeWorld(
  scenario: RuntimeScenario,
  options: RuntimeWorldOptions,
  hooks: RuntimeWorldHooks,
): RuntimeWorldParts {
  const config = resolveConfig(scenario.config);
  const views = new RuntimeViews(config, createRuntimeBuffers(config, scenarioRingWords(scenario)));
  const now = () => hooks.now();
  const seed = scenario.engine.seed ?? 1;
  const bells = BELL_ROLES.map((r) => views.doorbell(ACTORS[r] as 'scheduler'));
  const main = new RuntimeMainThread(
    scenario,
    new SubmitQueue(views.ring('submit'), views.doorbell('scheduler')),
  );
  const { failing, ackFaults } = transferFaultsOf(scenario);
  const stalls: RoleStall[] = [];
  for (const e of scenario.events) {
    if (e.kind === 'stall') stalls.push({ actor: e.actor, fromMs: e.atMs, toMs: e.atMs + e.forMs });
  }
  const engine = new EngineSimulator(
    views,
    options.hashing,
    { ended: (summary) => hooks.ended(summary) },
    scenario.engine,
    ringOthers(views, 'scheduler'),
    now,
  );
  const hasher = new HasherLoop(views, options.hashing, { ...scenario.hasher, seed });
  const transferRandom = new Prng(seed, 0x7a5f);
  const allocator = new AllocatorLoop(views, {
    lag: { ...scenario.allocator, seed },
    unsafeIgnorePins: !options.pins,
    now,
  });
  const backend = new StepTransferBackend(
    views.transferArenas(),
    failing,
    scenario.events.some((e) => e.kind === 'load-fail'),
    scenario.completionBell === false ? undefined : bells[STORE],
    scenario.gpuMaps === true,
    scenario.transferCapacity ?? Infinity,
  );
  // The store is built after the relay and the checks its options call.
  const acks = new RankAckRelay(backend, config.ranks, ackFaults, now, (jobId) =>
    store.planner.issuedJob(jobId),
  );
  const checks = new RuntimeChecks(
    views,
    () => store,
    (inv, message) => hooks.flag(inv, message),
  );
  const store = storeLoop(scenario, options, views, acks, checks, hooks);
  return {
    config,
    views,
    bells,
    engine,
    hasher,
    allocator,
    store,
    backend,
    acks,
    checks,
    main,
    transferRandom,
    stalls,
    roles: ACTORS.map(() => ({ seen: undefined, untilMs: 0, busyUntilMs: 0, stopped: false })),
    transferFaults: failing.size > 0,
    draftRewrite: scenario.events.some((e) => e.kind === 'draft-rewrite'),
  };
}
