// The simulated engine: every role of kvoff as a sequence of steps over one
// SharedState, driven from one thread. Each step is one publication (a batch
// of token progress, one hash block and the keys it completes, one block ID,
// a preemption clear, a nulled window block, one store-planning pass of one
// slot, the copy of one chunk, the completion of one job). A strategy picks
// which role steps next; inside a store-planning pass, at the points where
// another thread's write can land (after the snapshot, after the pins), the
// strategy may run other roles' steps before the pass goes on.
//
// The roles are the core's own (SchedulerRole, HasherRole, AllocatorRole,
// StorePlanner, GpuBlockPool, HostTier, copyChunkToTier): nothing here decides
// a store boundary. What is simulated is only the engine around them: when
// tokens are scheduled, which blocks they get, and the forward pass that
// writes a block's bytes when it is allocated, so a block reused mid-copy
// shows up as a byte mismatch.
import { resolveConfig } from '../config.js';
import type { Config } from '../config.js';
import type { ArenaGeometry } from '../copy.js';
import { InvalidArgumentError, LegacyAssertionError } from '../errors.js';
import { GpuBlockPool } from '../gpu-pool.js';
import type { Hashing } from '../hashing.js';
import type { PlanPoint, PlannerCounters } from '../planner.js';
import type { StorePolicy } from '../ready.js';
import { AllocatorRole } from '../roles/allocator.js';
import { statusName } from '../roles/handle.js';
import { HasherRole } from '../roles/hasher.js';
import { SchedulerRole } from '../roles/scheduler.js';
import type { RequestSnapshot } from '../roles/store.js';
import { SharedState } from '../state.js';
import { ENDED, RELEASED, A_TICK, A_SNAPSHOT, A_PINNED, WorldRequest } from './request.js';
import type { Violation, InvariantName } from './oracle.js';
import { ViolationSignal } from './oracle.js';
import {
  ACTORS,
  ALLOCATOR,
  HASHER,
  SCHEDULER,
  STORE,
  TRANSFER,
  estimateSteps,
  requestSpecs,
} from './scenario.js';
import type { Scenario, ScenarioEvent } from './scenario.js';
import { RUNTIME_ONLY_SWITCHES, switchOptions } from './switches.js';
import type { RuntimeSwitch } from './switches.js';
import type { Strategy } from './strategy.js';
import { TraceHash } from './trace.js';
import { WorldEngine } from './world-engine.js';
import { WorldStore } from './world-store.js';
import type { TraceLine } from './trace.js';

/** Other roles' steps a strategy may run at one point inside a store-planning pass. */
const NESTED_STEPS_MAX = 6;
/** Schedule length limit, as a multiple of the scenario's estimate: past it the schedule hangs. */
const STEPS_FACTOR_MAX = 40;

export interface WorldOptions {
  readonly policy: StorePolicy;
  /** False: the no-pin variant (planner skips pins, pool ignores them); must surface reuse mid-copy. */
  readonly pins: boolean;
  /** False: the planner skips the snapshot re-validation (test-only variant); must surface torn reads. */
  readonly revalidate?: boolean;
  /**
   * False: the end-of-request protocol is off (test-only variant, the planner's
   * unsafeSkipSettle): a finish or abort that overtakes the allocator's or the
   * hasher's last publications must surface as a hole.
   */
  readonly settle?: boolean;
  /** Test-only planner switches that re-create known bugs (load-while-writing is the runtime's only). */
  readonly switches?: readonly RuntimeSwitch[];
  readonly hashing: Hashing;
  /** Picks every step (top level and inside planning passes); absent for external drivers. */
  readonly strategy?: Strategy;
  /** Keep a readable line per step. */
  readonly record?: boolean;
  /** Report only these invariants (the others are not checked); all when absent. */
  readonly watch?: ReadonlySet<InvariantName>;
}

export interface WorldOutcome {
  readonly violation: Violation | undefined;
  /** Decisions taken (the trace length). */
  readonly steps: number;
  readonly traceHash: string;
  readonly decisions: readonly number[];
  readonly lines: readonly TraceLine[];
  readonly jobs: number;
  readonly chunksStored: number;
}

export class World {
  readonly scenario: Scenario;
  readonly config: Config;
  readonly state: SharedState;
  readonly stepsMax: number;
  violation: Violation | undefined;
  private stopped = false;

  private readonly policy: StorePolicy;
  private readonly strategy: Strategy | undefined;
  private readonly record: boolean;
  private readonly watched: ReadonlySet<InvariantName> | undefined;
  private readonly pool: GpuBlockPool;
  private readonly geo: ArenaGeometry;
  private readonly gpu: Uint32Array;
  /** The simulated engine: the scheduler, hasher and allocator roles and their requests. */
  private readonly engine: WorldEngine;
  /** The store and transfer roles over the planner and the tier, and their checks. */
  private readonly store: WorldStore;
  private readonly requests: readonly WorldRequest[];
  private readonly stalls: { actor: number; from: number; to: number }[] = [];
  private readonly tierFails: { at: number; count: number }[] = [];
  private readonly copyFails: { at: number; count: number }[] = [];
  /** Decisions at which the store resets (vLLM's reset_cache), ascending. */
  private readonly resetsAt: number[] = [];

  private decision = 0;
  private readonly decisions: number[] = [];
  private readonly hash = new TraceHash();
  private readonly lines: TraceLine[] = [];
  private nestedDepth = 0;
  /** Decision index of the step being run (the trace line's number). */
  private stepDecision = 0;

  constructor(scenario: Scenario, options: WorldOptions) {
    this.scenario = scenario;
    this.policy = options.policy;
    this.strategy = options.strategy;
    this.record = options.record ?? false;
    this.watched = options.watch;
    const config = resolveConfig(scenario.config);
    this.config = config;
    this.state = SharedState.create(config);
    this.pool = new GpuBlockPool(config.gpuBlocks, this.state.pins, {
      unsafeIgnorePins: !options.pins,
    });
    const switches = rolesSwitches(options.switches ?? []);
    const wordsPerBlock = config.bytesPerBlock / 4;
    this.geo = { wordsPerBlock, blocksPerChunk: config.blocksPerChunk };
    this.gpu = new Uint32Array(config.gpuBlocks * wordsPerBlock);
    const specs = requestSpecs(scenario);
    const requests = specs.map((s, i) => new WorldRequest(i, s, config, options.hashing));
    this.requests = requests;
    const byId = new Map(requests.map((r) => [r.spec.requestId, r]));
    let finishStall = 0;
    for (const e of scenario.events) this.addEvent(e, byId, (n) => (finishStall = n));
    for (const r of requests) r.preemptAt.sort((a, b) => a - b);
    this.tierFails.sort((a, b) => a.at - b.at);
    this.copyFails.sort((a, b) => a.at - b.at);
    this.resetsAt.sort((a, b) => a - b);
    const slotOwner = new Array<WorldRequest | undefined>(config.maxRequests).fill(undefined);
    this.store = this.newStore(options, switches, slotOwner);
    this.engine = this.newEngine(options, slotOwner, finishStall);
    this.stepsMax = STEPS_FACTOR_MAX * estimateSteps(specs) + 200;
  }

  /** The store side: the planner over the faulty tier, with the planner switches drawn for this run. */
  private newStore(
    options: WorldOptions,
    switches: readonly RuntimeSwitch[],
    slotOwner: (WorldRequest | undefined)[],
  ): WorldStore {
    return new WorldStore(
      {
        config: this.config,
        state: this.state,
        pool: this.pool,
        gpu: this.gpu,
        geo: this.geo,
        slotOwner,
        plannerOptions: {
          policy: options.policy,
          ...switchOptions(switches, 'PlannerOptions'),
          unsafeSkipPins: !options.pins,
          unsafeSkipRevalidate: options.revalidate === false,
          unsafeSkipSettle: options.settle === false,
        },
      },
      {
        note: (actor, action, request, arg, text) => this.note(actor, action, request, arg, text),
        flag: (inv, message) => this.flag(inv, message),
        decision: () => this.decision,
        drained: (r) => this.engine.drained(r),
        onPlanPoint: (point, snap) => this.onPlanPoint(point, snap),
      },
    );
  }

  /** The engine side: the scheduler, hasher and allocator roles over the scenario's requests. */
  private newEngine(
    options: WorldOptions,
    slotOwner: (WorldRequest | undefined)[],
    finishStallSteps: number,
  ): WorldEngine {
    return new WorldEngine(
      {
        config: this.config,
        state: this.state,
        scheduler: new SchedulerRole(this.state),
        hasher: new HasherRole(this.state, options.hashing),
        allocator: new AllocatorRole(this.state),
        pool: this.pool,
        gpu: this.gpu,
        geo: this.geo,
        requests: this.requests,
        slotOwner,
        finishStallSteps,
      },
      {
        note: (actor, action, request, arg, text) => this.note(actor, action, request, arg, text),
        markDirty: (r) => this.store.markDirty(r),
        decision: () => this.decision,
        released: (slot) => {
          this.store.dirty[slot] = 0;
          this.store.starved[slot] = 0;
        },
      },
    );
  }

  private addEvent(
    e: ScenarioEvent,
    byId: Map<number, WorldRequest>,
    setFinishStall: (n: number) => void,
  ): void {
    switch (e.kind) {
      case 'request':
        return;
      case 'preempt':
        byId.get(e.requestId)?.preemptAt.push(e.afterSteps);
        return;
      case 'abort': {
        const r = byId.get(e.requestId);
        if (r) r.abortAt = Math.min(r.abortAt ?? e.afterSteps, e.afterSteps);
        return;
      }
      case 'stall':
        this.stalls.push({ actor: e.actor, from: e.at, to: e.at + e.forSteps });
        return;
      case 'tier-fail':
        this.tierFails.push({ at: e.at, count: e.count });
        return;
      case 'finish-mid-store':
        setFinishStall(e.forSteps);
        return;
      case 'copy-fail':
        this.copyFails.push({ at: e.at, count: e.count });
        return;
      case 'reset':
        this.resetsAt.push(e.at);
        return;
    }
  }

  // ---------------------------------------------------------------- driving

  /** Runs the schedule to its end with the strategy given at construction. */
  run(): WorldOutcome {
    const strategy = this.strategy;
    if (strategy === undefined) throw new Error('World.run needs a strategy');
    const enabled: number[] = [];
    while (this.violation === undefined && !this.stopped && !this.done()) {
      if (this.decision >= this.stepsMax) {
        this.stop('hang', `no end after ${this.decision} steps`);
        break;
      }
      this.applyTimedEvents();
      this.enabledInto(enabled, false);
      if (enabled.length === 0) {
        if (!this.anyStallActive()) {
          this.stop('hang', `no role can step: ${this.describeWaits()}`);
          break;
        }
        this.note(-1, A_TICK, -1, 0, () => 'all runnable roles stalled');
        this.decisions.push(-1);
        this.decision += 1;
        continue;
      }
      const a = strategy.pick(enabled, this.decision);
      this.decisions.push(a);
      this.decision += 1;
      this.stepActor(a);
    }
    if (this.violation === undefined && !this.stopped) this.endChecks();
    return this.outcome();
  }

  /** Roles that can take a step now (for external drivers). */
  enabledActors(): number[] {
    const out: number[] = [];
    this.applyTimedEvents();
    this.enabledInto(out, false);
    return out;
  }

  /** Runs one step of `actor` for an external driver, counting it as a decision. */
  externalStep(actor: number): void {
    if (this.violation !== undefined || this.stopped) return;
    this.decisions.push(actor);
    this.decision += 1;
    this.stepActor(actor);
    if (this.decision >= this.stepsMax && !this.done()) {
      this.stop('hang', `no end after ${this.decision} steps`);
    }
  }

  /** For external drivers: time passes without a step (the role picked could not step). */
  externalTick(): void {
    if (this.violation !== undefined || this.stopped) return;
    this.decisions.push(-1);
    this.decision += 1;
    if (this.decision >= this.stepsMax) this.stop('hang', `no end after ${this.decision} steps`);
  }

  /** For external drivers: ends the schedule (a hang if it is not over) and runs the end checks. */
  finishExternal(): WorldOutcome {
    if (this.violation === undefined && !this.stopped) {
      if (!this.done())
        this.stop('hang', `not over when the driver stopped: ${this.describeWaits()}`);
      else this.endChecks();
    }
    return this.outcome();
  }

  done(): boolean {
    if (this.stopped) return true;
    if (this.store.jobs.length > 0) return false;
    for (const r of this.requests) if (r.phase !== RELEASED) return false;
    return true;
  }

  /** The store planner's counters (what a run stored, dropped, failed). */
  get storeCounters(): Readonly<PlannerCounters> {
    return this.store.planner.counters;
  }

  outcome(): WorldOutcome {
    return {
      violation: this.violation,
      steps: this.decision,
      traceHash: this.hash.hex(),
      decisions: this.decisions,
      lines: this.lines,
      jobs: this.store.jobsDispatched,
      chunksStored: this.store.chunksDispatched,
    };
  }

  private stepActor(a: number): void {
    const outer = this.stepDecision;
    this.stepDecision = this.decision - 1;
    try {
      switch (a) {
        case SCHEDULER:
          this.engine.schedulerStep();
          break;
        case HASHER:
          this.engine.hasherStep();
          break;
        case ALLOCATOR:
          this.engine.allocatorStep();
          break;
        case STORE:
          this.store.storeStep();
          break;
        case TRANSFER:
          this.store.transferStep();
          break;
      }
    } catch (err) {
      if (this.nestedDepth > 0) throw err; // unwinds through the planning pass to the top step
      if (err instanceof ViolationSignal) this.violation ??= err.violation;
      else {
        const kind = err instanceof LegacyAssertionError ? 'LegacyAssertionError' : errName(err);
        this.stop(
          'crash',
          `${ACTORS[a]} threw ${kind}: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
    } finally {
      this.stepDecision = outer;
    }
  }

  /** `betweenSteps`: not inside a planning pass (the steps nested in one run from onPlanPoint). */
  private applyTimedEvents(betweenSteps = true): void {
    while (this.tierFails.length > 0 && this.tierFails[0]!.at <= this.decision) {
      this.store.tier.failNext += this.tierFails.shift()!.count;
    }
    while (this.copyFails.length > 0 && this.copyFails[0]!.at <= this.decision) {
      this.store.copyFailNext += this.copyFails.shift()!.count;
    }
    // Between two steps, never inside a planning pass (vLLM resets between steps).
    while (betweenSteps && this.resetsAt.length > 0 && this.resetsAt[0]! <= this.decision) {
      this.resetsAt.shift();
      this.store.reset();
    }
  }

  private anyStallActive(): boolean {
    if (this.engine.transferStallUntil > this.decision) return true;
    for (const s of this.stalls) if (s.from <= this.decision && this.decision < s.to) return true;
    return false;
  }

  private stalled(actor: number): boolean {
    if (actor === TRANSFER && this.engine.transferStallUntil > this.decision) return true;
    for (const s of this.stalls) {
      if (s.actor === actor && s.from <= this.decision && this.decision < s.to) return true;
    }
    return false;
  }

  private enabledInto(out: number[], nested: boolean): void {
    out.length = 0;
    if (!this.stalled(SCHEDULER) && this.engine.findSchedulerWork() !== undefined)
      out.push(SCHEDULER);
    if (!this.stalled(HASHER) && this.engine.findHasherWork() !== undefined) out.push(HASHER);
    if (!this.stalled(ALLOCATOR) && this.engine.findAllocatorWork() !== undefined)
      out.push(ALLOCATOR);
    // Inside a planning pass, "store" means: go on with the pass.
    if (nested || this.store.findDirtySlot() !== -1) out.push(STORE);
    if (!this.stalled(TRANSFER) && this.store.jobs.length > 0) out.push(TRANSFER);
  }

  /** Inside the planner: the strategy may run other roles before the pass goes on. */
  private onPlanPoint(point: PlanPoint, snap: Readonly<RequestSnapshot>): void {
    if (point === 'snapshot') {
      this.store.observeSnapshot(snap);
      this.note(
        STORE,
        A_SNAPSHOT,
        snap.slot,
        snap.generation,
        () =>
          `plan slot ${snap.slot}: snapshot gen ${snap.generation} ${statusName(snap.status)}, tokens ${snap.computedTokens}+${snap.scheduledTokens}/${snap.numTokens}, keys [${Array.from(snap.keyCount).join(',')}] blocks [${Array.from(snap.blockCount).join(',')}] cursors [${Array.from(snap.cursor).join(',')}] -> ready [${Array.from(this.store.snapReady).join(',')}]`,
      );
    } else {
      this.note(
        STORE,
        A_PINNED,
        snap.slot,
        snap.generation,
        () => `plan slot ${snap.slot}: source blocks pinned, re-validating`,
      );
    }
    const strategy = this.strategy;
    if (strategy === undefined) return;
    const enabled: number[] = [];
    for (let i = 0; i < NESTED_STEPS_MAX; i += 1) {
      if (this.decision >= this.stepsMax) return;
      this.applyTimedEvents(false);
      this.enabledInto(enabled, true);
      const a = strategy.pick(enabled, this.decision);
      this.decisions.push(a);
      this.decision += 1;
      if (a === STORE) return;
      this.nestedDepth += 1;
      try {
        this.stepActor(a);
      } finally {
        this.nestedDepth -= 1;
      }
    }
  }

  /** Invariant 6 (and 3 once more), at the end: the store's checks, as watched. */
  private endChecks(): void {
    this.store.endChecks((inv, message) => {
      if (this.watched !== undefined && !this.watched.has(inv)) return false;
      this.violation = this.violationOf(inv, message);
      return true;
    });
  }

  /** Ends the schedule (a throw or a hang); a violation unless other invariants are watched. */
  private stop(inv: InvariantName, message: string): void {
    this.stopped = true;
    if (this.watched === undefined || this.watched.has(inv)) {
      this.violation = this.violationOf(inv, message);
    }
  }

  /** Raises a violation of `inv` unless the run watches other invariants only. */
  private flag(inv: InvariantName, message: string): void {
    if (this.watched !== undefined && !this.watched.has(inv)) return;
    throw new ViolationSignal(this.violationOf(inv, message));
  }

  private violationOf(invariant: InvariantName, message: string): Violation {
    return { invariant, message, decision: this.decision };
  }

  private describeWaits(): string {
    return this.requests
      .map(
        (r) =>
          `r${r.spec.requestId}:${['pending', 'live', 'ended', 'released'][r.phase]}${r.phase === ENDED && !this.engine.drained(r) ? '(not drained)' : ''}`,
      )
      .join(' ');
  }

  private note(
    actor: number,
    action: number,
    request: number,
    arg: number,
    text: () => string,
  ): void {
    this.hash.add((actor + 1) * 256 + action);
    this.hash.add(request);
    this.hash.add(arg);
    if (this.record) {
      this.lines.push({
        decision: actor === -1 ? this.decision : this.stepDecision,
        actor: actor === -1 ? 'tick' : ACTORS[actor]!,
        nested: this.nestedDepth > 0,
        text: text(),
      });
    }
  }
}

function errName(err: unknown): string {
  return err instanceof Error ? err.name : typeof err;
}

/** The switches asked for, refused when one needs the runtime target. */
function rolesSwitches(asked: readonly RuntimeSwitch[]): RuntimeSwitch[] {
  const switches = new Set(asked);
  for (const only of RUNTIME_ONLY_SWITCHES) {
    if (switches.has(only)) {
      throw new InvalidArgumentError('switches', `${only} needs --target runtime`);
    }
  }
  return [...switches];
}
