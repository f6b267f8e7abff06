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
import { copyChunkToTier, tierChunkMatches, writeComputedBlock } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import { InvalidArgumentError, LegacyAssertionError } from '../errors.js';
import { GpuBlockPool } from '../gpu-pool.js';
import type { Hashing } from '../hashing.js';
import type { StoreJob } from '../job.js';
import { T_CURSOR, T_DRAINED_GENERATION } from '../layout.js';
import { ChunkLedger, ledgerObserver } from '../ledger.js';
import type { DrainAccount } from '../ledger.js';
import { describeLeak, leakReportOf } from '../leaks.js';
import { StorePlanner } from '../planner.js';
import type { PlanPoint, PlannerCounters } from '../planner.js';
import type { StorePolicy } from '../ready.js';
import { AllocatorRole } from '../roles/allocator.js';
import { statusName } from '../roles/handle.js';
import { HasherRole } from '../roles/hasher.js';
import { SchedulerRole } from '../roles/scheduler.js';
import type { RequestSnapshot } from '../roles/store.js';
import { SharedState } from '../state.js';
import { HostTier } from '../tier/host-tier.js';
import { FaultyTier } from './faulty-tier.js';
import { specChunkReachable, specCursorBound, specReadyChunks } from './spec/ready-spec.js';
import {
  PENDING,
  LIVE,
  ENDED,
  RELEASED,
  A_NONE,
  A_OPEN,
  A_ABORT,
  A_PREEMPT,
  A_PREFILL,
  A_DECODE,
  A_FINISH,
  A_RELEASE,
  A_CLEAR,
  A_FREE,
  A_NULL,
  A_PUBLISH,
  A_HASH,
  A_PLAN,
  A_COPY,
  A_COMPLETE,
  A_RESET,
  A_TICK,
  A_SNAPSHOT,
  A_PINNED,
  A_SETTLE,
  GROUP_SHIFT,
  WorldRequest,
} from './request.js';
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

interface InFlight {
  readonly job: StoreJob;
  copied: number;
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
  private readonly scheduler: SchedulerRole;
  private readonly hasher: HasherRole;
  private readonly allocator: AllocatorRole;
  private readonly planner: StorePlanner;
  private readonly pool: GpuBlockPool;
  private readonly tier: FaultyTier;
  private readonly geo: ArenaGeometry;
  private readonly gpu: Uint32Array;
  private readonly tierArena: Uint32Array;
  private readonly requests: WorldRequest[];
  private readonly slotOwner: (WorldRequest | undefined)[];
  private readonly dirty: Uint8Array;
  private readonly starved: Uint8Array;
  private readonly jobs: InFlight[] = [];
  /** What happened to every chunk: the oracle's holes, double stores and cursor moves. */
  private readonly ledger: ChunkLedger;
  /** Per slot: the ledger's account of the generation the last store step drained. */
  private readonly drainAccounts: (DrainAccount | undefined)[];
  /** Published tier entries and the chunk positions their bytes cover. */
  private readonly published = new Map<bigint, number[]>();
  private readonly stalls: { actor: number; from: number; to: number }[] = [];
  private readonly tierFails: { at: number; count: number }[] = [];
  private readonly copyFails: { at: number; count: number }[] = [];
  /** Job completions still to report a failed copy. */
  private copyFailNext = 0;
  /** Decisions at which the store resets (vLLM's reset_cache), ascending. */
  private readonly resetsAt: number[] = [];
  /** Jobs in flight at a reset (the oracle's own record: the planner's threshold is what it checks). */
  private readonly staleJobs = new Set<StoreJob>();
  private readonly finishStallSteps: number;
  private transferStallUntil = -1;
  private reservedBlocks = 0;

  private decision = 0;
  private readonly decisions: number[] = [];
  private readonly hash = new TraceHash();
  private readonly lines: TraceLine[] = [];
  private nestedDepth = 0;
  /** Decision index of the step being run (the trace line's number). */
  private stepDecision = 0;
  private schedRr = 0;
  private allocRr = 0;
  private hashRr = 0;
  private storeRr = 0;
  /** The first cursor move of the store step past the specification's bound. */
  private specCursorFinding: string | undefined;
  // The specification's view (spec/ready-spec.ts) of the planner's latest snapshot.
  private snapSeen = false;
  /** Per group, the cursor of the planner's latest snapshot. */
  private readonly snapCursor: Int32Array;
  private readonly snapReady: Int32Array;
  private jobsDispatched = 0;
  private chunksDispatched = 0;

  constructor(scenario: Scenario, options: WorldOptions) {
    this.scenario = scenario;
    this.policy = options.policy;
    this.strategy = options.strategy;
    this.record = options.record ?? false;
    this.watched = options.watch;
    const config = resolveConfig(scenario.config);
    this.config = config;
    this.state = SharedState.create(config);
    this.scheduler = new SchedulerRole(this.state);
    this.hasher = new HasherRole(this.state, options.hashing);
    this.allocator = new AllocatorRole(this.state);
    this.tier = new FaultyTier(new HostTier(config.tierChunks));
    this.pool = new GpuBlockPool(config.gpuBlocks, this.state.pins, {
      unsafeIgnorePins: !options.pins,
    });
    const switches = new Set(options.switches ?? []);
    for (const only of RUNTIME_ONLY_SWITCHES) {
      if (switches.has(only)) {
        throw new InvalidArgumentError('switches', `${only} needs --target runtime`);
      }
    }
    this.drainAccounts = new Array<DrainAccount | undefined>(config.maxRequests).fill(undefined);
    const ledger = new ChunkLedger(this.state, (a) => (this.drainAccounts[a.slot] = a));
    this.ledger = ledger;
    this.planner = new StorePlanner(this.state, this.tier, {
      policy: options.policy,
      // The final wait's clock is virtual: one ms per decision, so a schedule replays exactly.
      now: () => this.decision,
      ...switchOptions([...switches], 'PlannerOptions'),
      unsafeSkipPins: !options.pins,
      unsafeSkipRevalidate: options.revalidate === false,
      unsafeSkipSettle: options.settle === false,
      observer: ledgerObserver(ledger, {
        chunk: (slot, generation, group, chunk, outcome) => {
          const r = this.slotOwner[slot];
          if (r === undefined || r.handle.generation !== generation) return;
          if (outcome === 'unreachable') this.checkUnreachable(r, group, chunk);
        },
        cursorMoved: (snap, group, from) => this.checkCursorMove(snap, group, from),
      }),
      onPlanPoint: (point, snap) => this.onPlanPoint(point, snap),
    });
    const wordsPerBlock = config.bytesPerBlock / 4;
    this.geo = { wordsPerBlock, blocksPerChunk: config.blocksPerChunk };
    this.gpu = new Uint32Array(config.gpuBlocks * wordsPerBlock);
    this.tierArena = new Uint32Array(config.tierChunks * config.blocksPerChunk * wordsPerBlock);
    const specs = requestSpecs(scenario);
    this.requests = specs.map((s, i) => new WorldRequest(i, s, config, options.hashing));
    const byId = new Map(this.requests.map((r) => [r.spec.requestId, r]));
    let finishStall = 0;
    for (const e of scenario.events) this.addEvent(e, byId, (n) => (finishStall = n));
    this.finishStallSteps = finishStall;
    for (const r of this.requests) r.preemptAt.sort((a, b) => a - b);
    this.tierFails.sort((a, b) => a.at - b.at);
    this.copyFails.sort((a, b) => a.at - b.at);
    this.resetsAt.sort((a, b) => a - b);
    this.slotOwner = new Array<WorldRequest | undefined>(config.maxRequests).fill(undefined);
    this.dirty = new Uint8Array(config.maxRequests);
    this.starved = new Uint8Array(config.maxRequests);
    this.snapReady = new Int32Array(config.groups.length);
    this.snapCursor = new Int32Array(config.groups.length);
    this.stepsMax = STEPS_FACTOR_MAX * estimateSteps(specs) + 200;
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
    if (this.jobs.length > 0) return false;
    for (const r of this.requests) if (r.phase !== RELEASED) return false;
    return true;
  }

  /** The store planner's counters (what a run stored, dropped, failed). */
  get storeCounters(): Readonly<PlannerCounters> {
    return this.planner.counters;
  }

  outcome(): WorldOutcome {
    return {
      violation: this.violation,
      steps: this.decision,
      traceHash: this.hash.hex(),
      decisions: this.decisions,
      lines: this.lines,
      jobs: this.jobsDispatched,
      chunksStored: this.chunksDispatched,
    };
  }

  private stepActor(a: number): void {
    const outer = this.stepDecision;
    this.stepDecision = this.decision - 1;
    try {
      switch (a) {
        case SCHEDULER:
          this.schedulerStep();
          break;
        case HASHER:
          this.hasherStep();
          break;
        case ALLOCATOR:
          this.allocatorStep();
          break;
        case STORE:
          this.storeStep();
          break;
        case TRANSFER:
          this.transferStep();
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
      this.tier.failNext += this.tierFails.shift()!.count;
    }
    while (this.copyFails.length > 0 && this.copyFails[0]!.at <= this.decision) {
      this.copyFailNext += this.copyFails.shift()!.count;
    }
    // Between two steps, never inside a planning pass (vLLM resets between steps).
    while (betweenSteps && this.resetsAt.length > 0 && this.resetsAt[0]! <= this.decision) {
      this.resetsAt.shift();
      this.reset();
    }
  }

  /**
   * vLLM's reset_cache: the tier is emptied, jobs in flight become stale,
   * every live request not yet drained stores its chunks again from cursor 0.
   * The oracle's memory of the epoch that ended goes with it: which keys the
   * tier held here, and in the chunk ledger (at each restarted request's new
   * store epoch) what it dispatched, dropped or passed and where its cursors
   * were; its hole check then asks the new epoch for every chunk again.
   */
  private reset(): void {
    for (const t of this.jobs) this.staleJobs.add(t.job);
    // The chunk ledger starts each restarted request's account over at its new store epoch.
    this.planner.reset();
    this.published.clear();
    for (let s = 0; s < this.dirty.length; s += 1) if (this.slotOwner[s]) this.dirty[s] = 1;
    this.note(
      STORE,
      A_RESET,
      this.planner.counters.resets,
      this.jobs.length,
      () =>
        `reset: tier emptied, ${this.jobs.length} job(s) in flight become stale, live requests store from cursor 0`,
    );
  }

  private anyStallActive(): boolean {
    if (this.transferStallUntil > this.decision) return true;
    for (const s of this.stalls) if (s.from <= this.decision && this.decision < s.to) return true;
    return false;
  }

  private stalled(actor: number): boolean {
    if (actor === TRANSFER && this.transferStallUntil > this.decision) return true;
    for (const s of this.stalls) {
      if (s.actor === actor && s.from <= this.decision && this.decision < s.to) return true;
    }
    return false;
  }

  private enabledInto(out: number[], nested: boolean): void {
    out.length = 0;
    if (!this.stalled(SCHEDULER) && this.findSchedulerWork() !== undefined) out.push(SCHEDULER);
    if (!this.stalled(HASHER) && this.findHasherWork() !== undefined) out.push(HASHER);
    if (!this.stalled(ALLOCATOR) && this.findAllocatorWork() !== undefined) out.push(ALLOCATOR);
    // Inside a planning pass, "store" means: go on with the pass.
    if (nested || this.findDirtySlot() !== -1) out.push(STORE);
    if (!this.stalled(TRANSFER) && this.jobs.length > 0) out.push(TRANSFER);
  }

  /** Inside the planner: the strategy may run other roles before the pass goes on. */
  private onPlanPoint(point: PlanPoint, snap: Readonly<RequestSnapshot>): void {
    if (point === 'snapshot') {
      this.observeSnapshot(snap);
      this.note(
        STORE,
        A_SNAPSHOT,
        snap.slot,
        snap.generation,
        () =>
          `plan slot ${snap.slot}: snapshot gen ${snap.generation} ${statusName(snap.status)}, tokens ${snap.computedTokens}+${snap.scheduledTokens}/${snap.numTokens}, keys [${Array.from(snap.keyCount).join(',')}] blocks [${Array.from(snap.blockCount).join(',')}] cursors [${Array.from(snap.cursor).join(',')}] -> ready [${Array.from(this.snapReady).join(',')}]`,
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

  /**
   * The specification's check of a cursor move (beside the ledger's, which
   * reads the planner's own ready prefix): never past the ready prefix of the
   * snapshot the pass read, recomputed from its facts, nor past the
   * token-ready chunks once the request ended. Raised after the step.
   */
  private checkCursorMove(snap: Readonly<RequestSnapshot>, group: number, from: number): void {
    if (this.specCursorFinding !== undefined) return;
    const g = this.config.groups[group]!;
    const bound = specCursorBound(
      this.config,
      snap,
      g,
      snap.keyCount[group]!,
      snap.blockCount[group]!,
    );
    const to = snap.cursor[group]!;
    if (to > from && to > bound) {
      this.specCursorFinding = `slot ${snap.slot} group ${group}: cursor advanced ${from} -> ${to} past ${bound}, the specification's bound for the snapshot it was read from (keys ${snap.keyCount[group]}, blocks ${snap.blockCount[group]})`;
    }
  }

  private observeSnapshot(snap: Readonly<RequestSnapshot>): void {
    this.snapSeen = true;
    for (const g of this.config.groups) {
      this.snapReady[g.index] = specReadyChunks(
        this.config,
        snap,
        g,
        snap.keyCount[g.index]!,
        snap.blockCount[g.index]!,
      );
      this.snapCursor[g.index] = snap.cursor[g.index]!;
    }
  }

  // -------------------------------------------------------------- scheduler

  private findSchedulerWork(): WorldRequest | undefined {
    const n = this.requests.length;
    for (let i = 0; i < n; i += 1) {
      const r = this.requests[(this.schedRr + i) % n]!;
      if (this.schedulerAction(r) !== A_NONE) return r;
    }
    return undefined;
  }

  private schedulerAction(r: WorldRequest): number {
    switch (r.phase) {
      case PENDING: {
        // Admission in arrival order, only when a slot is free and the request's blocks are reserved.
        for (const o of this.requests) {
          if (o === r) break;
          if (o.phase === PENDING) return A_NONE;
        }
        if (this.scheduler.freeSlotCount === 0) return A_NONE;
        if (this.reservedBlocks + r.need > this.config.gpuBlocks - 1) return A_NONE;
        return A_OPEN;
      }
      case LIVE: {
        if (r.clearPending) return A_NONE;
        if (r.abortAt !== undefined && r.steps >= r.abortAt) return A_ABORT;
        if (r.preemptAt.length > 0 && r.preemptAt[0]! <= r.steps && r.steps > 0) return A_PREEMPT;
        const prefillDone = r.computed + r.scheduled >= r.numTokens;
        if (!prefillDone) {
          const c = r.computed + r.scheduled;
          const s = Math.min(r.spec.batchTokens, r.numTokens - c);
          return this.canCover(r, c + s) ? A_PREFILL : A_NONE;
        }
        if (r.decoded < r.spec.decode.length) {
          return this.canCover(r, r.numTokens + 1 + r.spec.drafts) ? A_DECODE : A_NONE;
        }
        return A_FINISH;
      }
      case ENDED:
        return r.freed ? A_RELEASE : A_NONE;
      default:
        return A_NONE;
    }
  }

  private blocksShort(r: WorldRequest, tokens: number): number {
    let n = 0;
    for (const g of this.config.groups) {
      const want = Math.min(Math.ceil(tokens / g.tokensPerBlock), this.config.maxBlocksPerRequest);
      n += Math.max(0, want - r.allocated[g.index]!.length);
    }
    return n;
  }

  private canCover(r: WorldRequest, tokens: number): boolean {
    const n = this.blocksShort(r, tokens);
    if (n <= this.pool.available) return true;
    this.pool.releaseUnpinned(); // the allocator's own housekeeping: copies may have finished
    return n <= this.pool.available;
  }

  /** Engine-side allocation plus the forward pass: the new blocks get their chunk's bytes now. */
  private allocateFor(r: WorldRequest, tokens: number): boolean {
    const n = this.blocksShort(r, tokens);
    if (n === 0) return true;
    // canCover counted the free list; inside a planning pass a free block may be
    // pinned for a moment (a torn read about to be retried), and the pool skips it.
    const blocks = this.pool.allocate(n);
    if (blocks === undefined) return false;
    let next = 0;
    const bpc = this.config.blocksPerChunk;
    for (const g of this.config.groups) {
      const list = r.allocated[g.index]!;
      const want = Math.min(Math.ceil(tokens / g.tokensPerBlock), this.config.maxBlocksPerRequest);
      while (list.length < want) {
        const block = blocks[next++]!;
        const position = list.length;
        const key = r.expectedKeys[g.index]![Math.floor(position / bpc)] ?? 0n;
        writeComputedBlock(this.gpu, this.geo, block, key, position);
        list.push(block);
      }
    }
    return true;
  }

  private waitForBlocks(r: WorldRequest): void {
    this.note(
      SCHEDULER,
      A_NONE,
      r.index,
      0,
      () => `r${r.spec.requestId} waits: the pool cannot supply its blocks right now`,
    );
  }

  private schedulerStep(): void {
    const r = this.findSchedulerWork();
    if (r === undefined) return;
    this.schedRr = (r.index + 1) % this.requests.length;
    const action = this.schedulerAction(r);
    const s = this.scheduler;
    switch (action) {
      case A_OPEN: {
        r.handle = s.open({ requestId: r.spec.requestId, promptTokens: r.spec.prompt });
        r.phase = LIVE;
        r.numTokens = r.spec.prompt.length;
        this.reservedBlocks += r.need;
        this.slotOwner[r.handle.slot] = r;
        this.markDirty(r);
        this.note(
          SCHEDULER,
          action,
          r.index,
          r.handle.slot,
          () =>
            `open r${r.spec.requestId} in slot ${r.handle.slot} (gen ${r.handle.generation}), prompt ${r.numTokens} tokens`,
        );
        return;
      }
      case A_ABORT: {
        s.abort(r.handle);
        r.phase = ENDED;
        this.markDirty(r);
        this.note(
          SCHEDULER,
          action,
          r.index,
          r.steps,
          () =>
            `abort r${r.spec.requestId} (computed ${r.computed}${r.steps === 0 ? ', queued' : ''})`,
        );
        return;
      }
      case A_PREEMPT: {
        s.preempt(r.handle);
        r.preemptAt.shift();
        r.computed = 0;
        r.scheduled = 0;
        r.clearPending = true;
        this.markDirty(r);
        this.note(
          SCHEDULER,
          action,
          r.index,
          r.steps,
          () => `preempt r${r.spec.requestId}: progress back to 0, blocks to be cleared`,
        );
        return;
      }
      case A_PREFILL: {
        const c = r.computed + r.scheduled;
        const sc = Math.min(r.spec.batchTokens, r.numTokens - c);
        if (!this.allocateFor(r, c + sc)) return this.waitForBlocks(r);
        s.progress(r.handle, c, sc);
        r.computed = c;
        r.scheduled = sc;
        r.steps += 1;
        this.markDirty(r);
        this.note(
          SCHEDULER,
          action,
          r.index,
          c + sc,
          () => `prefill r${r.spec.requestId}: computed ${c} + scheduled ${sc}`,
        );
        return;
      }
      case A_DECODE: {
        // Every known token is computed now; drafts of the last step were rejected.
        const c = r.numTokens;
        const sc = 1 + r.spec.drafts;
        if (!this.allocateFor(r, c + sc)) return this.waitForBlocks(r);
        const tok = r.spec.decode[r.decoded]!;
        s.appendTokens(r.handle, [tok]);
        r.numTokens += 1;
        r.decoded += 1;
        s.progress(r.handle, c, sc);
        r.computed = c;
        r.scheduled = sc;
        r.steps += 1;
        this.markDirty(r);
        this.note(
          SCHEDULER,
          action,
          r.index,
          r.numTokens,
          () =>
            `decode r${r.spec.requestId}: token ${r.numTokens}, computed ${c} + scheduled ${sc}${r.spec.drafts ? ` (${r.spec.drafts} drafts)` : ''}`,
        );
        return;
      }
      case A_FINISH: {
        s.finish(r.handle);
        r.phase = ENDED;
        r.finished = true;
        if (this.finishStallSteps > 0) {
          this.transferStallUntil = Math.max(
            this.transferStallUntil,
            this.decision + this.finishStallSteps,
          );
        }
        this.markDirty(r);
        this.note(
          SCHEDULER,
          action,
          r.index,
          r.numTokens,
          () => `finish r${r.spec.requestId} (${r.numTokens} tokens)`,
        );
        return;
      }
      case A_RELEASE: {
        const slot = r.handle.slot;
        s.release(r.handle);
        r.phase = RELEASED;
        this.reservedBlocks -= r.need;
        this.slotOwner[slot] = undefined;
        this.dirty[slot] = 0;
        this.starved[slot] = 0;
        this.note(
          SCHEDULER,
          action,
          r.index,
          slot,
          () => `release r${r.spec.requestId}: slot ${slot} free`,
        );
        return;
      }
    }
  }

  // ----------------------------------------------------------------- hasher

  private hashesWanted(r: WorldRequest): number {
    if (r.phase !== LIVE && r.phase !== ENDED) return 0;
    if (r.freed) return 0;
    return Math.floor(r.numTokens / this.config.tokensPerHash) - r.hashed;
  }

  private findHasherWork(): WorldRequest | undefined {
    const n = this.requests.length;
    for (let i = 0; i < n; i += 1) {
      const r = this.requests[(this.hashRr + i) % n]!;
      if (this.hashesWanted(r) > 0) return r;
    }
    return undefined;
  }

  private hasherStep(): void {
    const r = this.findHasherWork();
    if (r === undefined) return;
    this.hashRr = (r.index + 1) % this.requests.length;
    r.hashed += this.hasher.hash(r.handle, 1);
    this.markDirty(r);
    this.note(
      HASHER,
      A_HASH,
      r.index,
      r.hashed,
      () => `hash r${r.spec.requestId}: ${r.hashed} block hashes`,
    );
  }

  // -------------------------------------------------------------- allocator

  private drained(r: WorldRequest): boolean {
    const w = this.state.storeWord(r.handle.slot, T_DRAINED_GENERATION);
    return Atomics.load(this.state.control, w) === r.handle.generation;
  }

  private allocatorAction(r: WorldRequest): number {
    if (r.phase === LIVE && r.clearPending) return A_CLEAR;
    if (r.phase === ENDED && !r.freed) {
      if (this.drained(r)) return A_FREE;
    }
    if ((r.phase !== LIVE && r.phase !== ENDED) || r.freed) return A_NONE;
    if (r.phase === LIVE && this.nullable(r) !== undefined) return A_NULL;
    for (let g = 0; g < this.config.groups.length; g += 1) {
      if (r.published[g]! < r.allocated[g]!.length) return A_PUBLISH;
    }
    // The end handled: every block ID of the request is published, settle them.
    if (r.phase === ENDED && !r.settled) return A_SETTLE;
    return A_NONE;
  }

  /** [group, position] of a sliding-window block that slid out of the window, if any. */
  private nullable(r: WorldRequest): [number, number] | undefined {
    for (const g of this.config.groups) {
      if (g.kind !== 'sliding-window') continue;
      const windowTokens = (g.windowChunks ?? 0) * g.tokensPerChunk;
      const list = r.allocated[g.index]!;
      let p = r.nullScan[g.index]!;
      while (p < r.published[g.index]! && list[p] === 0) p += 1;
      r.nullScan[g.index] = p;
      if (p < r.published[g.index]! && (p + 1) * g.tokensPerBlock + windowTokens <= r.computed) {
        return [g.index, p];
      }
    }
    return undefined;
  }

  private findAllocatorWork(): WorldRequest | undefined {
    const n = this.requests.length;
    for (let i = 0; i < n; i += 1) {
      const r = this.requests[(this.allocRr + i) % n]!;
      if (this.allocatorAction(r) !== A_NONE) return r;
    }
    return undefined;
  }

  private allocatorStep(): void {
    const r = this.findAllocatorWork();
    if (r === undefined) return;
    this.allocRr = (r.index + 1) % this.requests.length;
    const action = this.allocatorAction(r);
    switch (action) {
      case A_SETTLE: {
        this.allocator.settle(r.handle);
        r.settled = true;
        this.markDirty(r);
        this.note(
          ALLOCATOR,
          action,
          r.index,
          0,
          () => `settle r${r.spec.requestId}: every block ID published, none will follow`,
        );
        return;
      }
      case A_CLEAR:
      case A_FREE: {
        const freed = this.allocator.clear(r.handle);
        const unpublished: number[] = [];
        for (let g = 0; g < this.config.groups.length; g += 1) {
          const list = r.allocated[g]!;
          for (let p = r.published[g]!; p < list.length; p += 1)
            if (list[p] !== 0) unpublished.push(list[p]!);
          r.allocated[g] = [];
          r.published[g] = 0;
          r.nullScan[g] = 0;
        }
        this.pool.release(freed);
        this.pool.release(unpublished);
        if (action === A_CLEAR) r.clearPending = false;
        else r.freed = true;
        this.markDirty(r);
        this.note(
          ALLOCATOR,
          action,
          r.index,
          freed.length,
          () =>
            `${action === A_CLEAR ? 'clear (preempted)' : 'free (drained)'} r${r.spec.requestId}: blocks [${freed.join(',')}]${unpublished.length ? ` + unpublished [${unpublished.join(',')}]` : ''} back to the pool`,
        );
        return;
      }
      case A_NULL: {
        const [g, p] = this.nullable(r)!;
        const old = this.allocator.nullBlock(r.handle, g, p);
        r.allocated[g]![p] = 0;
        this.pool.release([old]);
        this.markDirty(r);
        this.note(
          ALLOCATOR,
          action,
          r.index,
          p,
          () =>
            `null r${r.spec.requestId} group ${g} position ${p} (block ${old} slid out of the window)`,
        );
        return;
      }
      case A_PUBLISH: {
        for (let g = 0; g < this.config.groups.length; g += 1) {
          const p = r.published[g]!;
          if (p >= r.allocated[g]!.length) continue;
          const block = r.allocated[g]![p]!;
          this.allocator.appendBlocks(r.handle, g, [block]);
          r.published[g] = p + 1;
          this.markDirty(r);
          this.note(
            ALLOCATOR,
            action,
            r.index,
            g * GROUP_SHIFT + p,
            () => `append r${r.spec.requestId} group ${g} block ${block} at position ${p}`,
          );
          return;
        }
      }
    }
  }

  // ------------------------------------------------------------------ store

  private markDirty(r: WorldRequest): void {
    if (r.handle.slot >= 0 && this.slotOwner[r.handle.slot] === r) this.dirty[r.handle.slot] = 1;
  }

  private findDirtySlot(): number {
    const n = this.config.maxRequests;
    for (let i = 0; i < n; i += 1) {
      const slot = (this.storeRr + i) % n;
      if (this.dirty[slot] === 1) return slot;
    }
    return -1;
  }

  private storeStep(): void {
    const slot = this.findDirtySlot();
    if (slot === -1) return;
    this.storeRr = (slot + 1) % this.config.maxRequests;
    this.dirty[slot] = 0;
    const r = this.slotOwner[slot];
    const counters = this.planner.counters;
    const droppedBefore = counters.chunksDroppedForCapacity;
    const failuresBefore = counters.allocationFailures;
    this.snapSeen = false;
    this.drainAccounts[slot] = undefined;
    this.ledger.takeCursorFindings(); // another step's (not watched): not this one's
    const job = this.planner.planSlot(slot);
    const gen = r?.handle.generation ?? 0;
    if (r === undefined || r.phase === RELEASED || r.phase === PENDING) {
      this.note(STORE, A_PLAN, -1, slot, () => `plan slot ${slot}: free`);
      return;
    }
    if (job !== undefined && job.generation !== gen) {
      this.flag(
        'mispairing',
        `job for generation ${job.generation} while slot ${slot} holds ${gen}`,
      );
    }
    // Cursor: monotonic, and never above the ready prefix of the snapshot it
    // was advanced from (the ledger's findings of this step). A violation is
    // raised once the step is in the trace.
    const f = this.ledger.takeCursorFindings()[0];
    const spec = this.specCursorFinding;
    this.specCursorFinding = undefined;
    const late: [InvariantName, string] | undefined =
      f === undefined
        ? spec === undefined
          ? undefined
          : ['cursor-within-ready', `r${r.spec.requestId} ${spec}`]
        : f.to < f.from
          ? [
              'cursor-monotonic',
              `r${r.spec.requestId} group ${f.group}: cursor moved back ${f.from} -> ${f.to}`,
            ]
          : [
              'cursor-within-ready',
              `r${r.spec.requestId} group ${f.group}: cursor advanced ${f.from} -> ${f.to} past the ready prefix ${f.ready} it was read with`,
            ];
    const dropped = counters.chunksDroppedForCapacity > droppedBefore;
    const cursors: number[] = [];
    for (let g = 0; g < this.config.groups.length; g += 1) {
      cursors.push(Atomics.load(this.state.control, this.state.storeWord(slot, T_CURSOR + g)));
    }
    this.starved[slot] = counters.allocationFailures > failuresBefore ? 1 : 0;
    if (job !== undefined) this.dispatch(r, job);
    this.note(
      STORE,
      A_PLAN,
      r.index,
      job ? job.chunks.length : 0,
      () =>
        `plan slot ${slot} (r${r.spec.requestId}) done ${job ? `-> job ${job.jobId} chunks ${job.chunks.map((c) => `${c.group}:${c.chunk}`).join(',')}` : 'no job'}; cursors [${cursors.join(',')}]${this.starved[slot] ? ' (tier could not allocate)' : ''}${dropped ? ' (dropped for capacity)' : ''}`,
    );
    if (late !== undefined) this.flag(late[0], late[1]);
    if (r.phase === ENDED && !r.drainChecked) {
      if (this.drained(r)) {
        r.drainChecked = true;
        this.checkNoHole(r, this.drainAccounts[slot]);
      } else if (this.starved[slot] === 1) {
        this.dirty[slot] = 1; // the tier refused the final offer: retried (a bounded number of times)
      }
      // Otherwise its keys lag and the hasher marks the slot dirty when it
      // hashes; marking it dirty here would keep the store enabled forever and
      // starve the hasher under PCT.
    }
  }

  private dispatch(r: WorldRequest, job: StoreJob): void {
    for (const c of job.chunks) {
      // The specification: only chunks past the cursor and ready in the snapshot planned from.
      if (c.chunk < this.snapCursor[c.group]! || c.chunk >= this.snapReady[c.group]!) {
        this.flag(
          'cursor-within-ready',
          `r${r.spec.requestId} chunk ${c.group}:${c.chunk} dispatched outside [cursor ${this.snapCursor[c.group]}, ready ${this.snapReady[c.group]}) of the snapshot it was planned from`,
        );
      }
      const expected = r.expectedKeys[c.group]![c.chunk];
      if (expected !== c.key) {
        this.flag(
          'mispairing',
          `r${r.spec.requestId} chunk ${c.group}:${c.chunk} dispatched with key ${c.key.toString(16)}, expected ${expected?.toString(16) ?? 'none (tokens not known)'}`,
        );
      }
      if (this.ledger.storedTwice(job.slot, job.generation, c.group, c.chunk)) {
        this.flag(
          'double-store',
          `r${r.spec.requestId} chunk ${c.group}:${c.chunk} dispatched twice in generation ${job.generation}`,
        );
      }
    }
    this.jobs.push({ job, copied: 0 });
    this.jobsDispatched += 1;
    this.chunksDispatched += job.chunks.length;
  }

  /**
   * A chunk the planner passed as unreachable must be one by the
   * specification (no load hit can ever read it); else it would be a chunk
   * lost silently.
   */
  private checkUnreachable(r: WorldRequest, group: number, chunk: number): void {
    if (specChunkReachable(this.config, this.config.groups[group]!, chunk)) {
      this.flag(
        'hole',
        `r${r.spec.requestId} chunk ${group}:${chunk} passed as unreachable, but a load hit aligned to the full-attention chunk reads it`,
      );
    }
  }

  /**
   * Invariant 2, from the chunk ledger's account of the final pass: every
   * chunk that was token-ready when the request ended (finished or aborted)
   * was stored, or counted as dropped, or slid out of the window, or passed as
   * unreachable. Whether its key or block IDs were ever published does not
   * matter: lag must not hide a hole.
   */
  private checkNoHole(r: WorldRequest, account: DrainAccount | undefined): void {
    const hole = account?.firstHole;
    if (account === undefined || hole === undefined) return;
    const tc = account.tokenChunksByGroup[hole.group]!;
    this.flag(
      'hole',
      `r${r.spec.requestId} ${statusName(account.status)} with ${tc} token-ready chunk${tc === 1 ? '' : 's'} in group ${hole.group} (ready prefix ${this.snapReady[hole.group]}), but chunk ${hole.chunk} was never stored (nor counted as dropped)`,
    );
  }

  // --------------------------------------------------------------- transfer

  private transferStep(): void {
    const t = this.jobs[0];
    if (t === undefined) return;
    const job = t.job;
    if (t.copied < job.chunks.length) {
      const c = job.chunks[t.copied]!;
      copyChunkToTier(this.gpu, this.tierArena, this.geo, c);
      t.copied += 1;
      this.note(
        TRANSFER,
        A_COPY,
        job.slot,
        c.group * GROUP_SHIFT + c.chunk,
        () =>
          `copy job ${job.jobId} chunk ${c.group}:${c.chunk} from blocks [${c.blocks.join(',')}] to tier slot ${c.tierSlot}`,
      );
      return;
    }
    const failed = this.copyFailNext > 0;
    if (failed) this.copyFailNext -= 1;
    this.note(TRANSFER, A_COMPLETE, job.slot, job.jobId, () =>
      failed
        ? `complete job ${job.jobId}: the copy failed, entries discarded, blocks unpinned`
        : `complete job ${job.jobId}: bytes checked, entries published, blocks unpinned`,
    );
    // Invariant 3: the bytes about to be published are the expansion of their key.
    const stale = this.staleJobs.delete(job);
    for (const c of failed ? [] : job.chunks) {
      const positions = c.positions.map((p) => p % this.config.blocksPerChunk);
      if (!tierChunkMatches(this.tierArena, this.geo, c.tierSlot, c.key, positions)) {
        this.flag(
          'mispairing',
          `job ${job.jobId} chunk ${c.group}:${c.chunk} (key ${c.key.toString(16)}): tier bytes are not the expansion of its key (a source block held other bytes when it was copied)`,
        );
      }
      if (!stale) this.published.set(c.key, positions);
    }
    const failedBefore = this.planner.counters.chunksTransferFailed;
    // Invariant 8: a job from before a reset makes nothing readable after it.
    const before = stale ? job.chunks.map((c) => this.tier.state(c.key)) : [];
    this.planner.complete(job, !failed);
    if (stale) {
      job.chunks.forEach((c, i) => {
        if (before[i] !== 'hit' && this.tier.state(c.key) === 'hit') {
          this.flag(
            'reset',
            `job ${job.jobId} was in flight at a reset, and its completion published chunk ${c.group}:${c.chunk} (key ${c.key.toString(16)}) after it`,
          );
        }
      });
    }
    this.jobs.shift();
    // A failed copy's chunks are lost to the tier: counted, never silent.
    const counted = this.planner.counters.chunksTransferFailed - failedBefore;
    if (counted !== (failed ? job.chunks.length : 0)) {
      this.flag(
        'hole',
        `job ${job.jobId} completed ${failed ? 'with a failed copy' : 'successfully'}: ${counted} of its ${job.chunks.length} chunks counted as failed`,
      );
    }
    for (let s = 0; s < this.starved.length; s += 1) {
      if (this.starved[s] === 1 && this.slotOwner[s] !== undefined) this.dirty[s] = 1;
    }
  }

  // ------------------------------------------------------------------ oracle

  /** Invariant 6 (and 3 once more): nothing leaked, every published entry still verifies. */
  endChecks(): void {
    const fail = (inv: InvariantName, msg: string): boolean => {
      if (this.watched !== undefined && !this.watched.has(inv)) return false;
      this.violation = this.violationOf(inv, msg);
      return true;
    };
    this.pool.releaseUnpinned();
    const stats = this.tier.stats();
    // The runtime's leak report, from what this world's roles hold (no engine queue, no loads).
    const leak = describeLeak(
      leakReportOf(this.state, {
        scheduler: { pending: 0 },
        allocator: { inUse: this.pool.inUse, quarantined: this.pool.quarantined },
        store: {
          // Slots a reset retired count as writes never finished (the runtime's leftovers do the same).
          tierWriting: stats.writing + (stats.retired ?? 0),
          tierReading: stats.reading,
          jobsInFlight: this.planner.jobsHeld,
          loadLocks: 0,
        },
      }),
    );
    if (leak !== undefined && fail('leak', leak)) return;
    for (const [key, positions] of this.published) {
      const slot = this.tier.slotOf(key);
      if (slot === undefined) continue;
      if (!tierChunkMatches(this.tierArena, this.geo, slot, key, positions)) {
        if (
          fail(
            'mispairing',
            `tier entry ${key.toString(16)} in slot ${slot} does not hold its key's bytes`,
          )
        )
          return;
      }
    }
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
          `r${r.spec.requestId}:${['pending', 'live', 'ended', 'released'][r.phase]}${r.phase === ENDED && !this.drained(r) ? '(not drained)' : ''}`,
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
