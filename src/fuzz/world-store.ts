// The roles world's store and transfer roles: the core's StorePlanner over a
// faulty host tier plans one request slot per step, the copy of one chunk or
// the completion of one job is a transfer step, and vLLM's reset_cache empties
// the tier between two steps. The checks that can first be made here are made
// here: a dispatch against the specification's ready prefix and the chunk's
// expected key, a double store, a cursor move, a chunk passed as unreachable,
// a hole once the request drained, the bytes a completion publishes, a stale
// job publishing after a reset, and at the end the leak report and every
// published entry's bytes. World (world.ts) drives it.
import type { Config } from '../config.js';
import { copyChunkToTier, tierChunkMatches } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import type { GpuBlockPool } from '../gpu-pool.js';
import type { StoreJob } from '../job.js';
import { T_CURSOR } from '../layout.js';
import { ChunkLedger, ledgerObserver } from '../ledger.js';
import type { DrainAccount } from '../ledger.js';
import { describeLeak, leakReportOf } from '../leaks.js';
import { StorePlanner } from '../planner.js';
import type { PlanPoint, PlannerOptions } from '../planner.js';
import { statusName } from '../roles/handle.js';
import type { RequestSnapshot } from '../roles/store.js';
import type { SharedState } from '../state.js';
import { HostTier } from '../tier/host-tier.js';
import { FaultyTier } from './faulty-tier.js';
import type { InvariantName } from './oracle.js';
import {
  A_COMPLETE,
  A_COPY,
  A_PLAN,
  A_RESET,
  ENDED,
  GROUP_SHIFT,
  PENDING,
  RELEASED,
} from './request.js';
import type { WorldRequest } from './request.js';
import { STORE, TRANSFER } from './scenario.js';
import { specChunkReachable, specCursorBound, specReadyChunks } from './spec/ready-spec.js';

interface InFlight {
  readonly job: StoreJob;
  copied: number;
}

/** What the store asks of the world around it. */
export interface WorldStoreHooks {
  /** Adds a step to the trace (and its hash). */
  note(actor: number, action: number, request: number, arg: number, text: () => string): void;
  /** Raises a violation (unless the run watches other invariants only). */
  flag(inv: InvariantName, message: string): void;
  /** The decision being taken (the world's clock, and the planner's final-wait clock). */
  decision(): number;
  /** The allocator drained the request's generation. */
  drained(r: WorldRequest): boolean;
  /** Inside a planning pass, where other roles' steps may land. */
  onPlanPoint(point: PlanPoint, snap: Readonly<RequestSnapshot>): void;
}

/** The parts the store steps over (the world builds them). */
export interface WorldStoreParts {
  readonly config: Config;
  readonly state: SharedState;
  readonly pool: GpuBlockPool;
  readonly gpu: Uint32Array;
  readonly geo: ArenaGeometry;
  /** Per slot, the request that holds it (the engine's). */
  readonly slotOwner: readonly (WorldRequest | undefined)[];
  /** The planner's options beside its clock, observer and plan points (policy, unsafe switches). */
  readonly plannerOptions: PlannerOptions;
}

export class WorldStore {
  readonly planner: StorePlanner;
  readonly tier: FaultyTier;
  /** Jobs dispatched and not completed, oldest first. */
  readonly jobs: InFlight[] = [];
  /** Per slot: something new for the store to plan. */
  readonly dirty: Uint8Array;
  /** Per slot: the tier could not allocate at its last pass (planned again after a completion). */
  readonly starved: Uint8Array;
  /** Job completions still to report a failed copy. */
  copyFailNext = 0;
  jobsDispatched = 0;
  chunksDispatched = 0;
  // The specification's view (spec/ready-spec.ts) of the planner's latest snapshot.
  /** Per group, the ready prefix of the planner's latest snapshot. */
  readonly snapReady: Int32Array;
  private snapSeen = false;
  /** Per group, the cursor of the planner's latest snapshot. */
  private readonly snapCursor: Int32Array;
  private readonly config: Config;
  private readonly state: SharedState;
  private readonly pool: GpuBlockPool;
  private readonly gpu: Uint32Array;
  private readonly geo: ArenaGeometry;
  private readonly slotOwner: readonly (WorldRequest | undefined)[];
  private readonly tierArena: Uint32Array;
  /** What happened to every chunk: the oracle's holes, double stores and cursor moves. */
  private readonly ledger: ChunkLedger;
  /** Per slot: the ledger's account of the generation the last store step drained. */
  private readonly drainAccounts: (DrainAccount | undefined)[];
  /** Published tier entries and the chunk positions their bytes cover. */
  private readonly published = new Map<bigint, number[]>();
  /** Jobs in flight at a reset (the oracle's own record: the planner's threshold is what it checks). */
  private readonly staleJobs = new Set<StoreJob>();
  private storeRr = 0;
  /** The first cursor move of the store step past the specification's bound. */
  private specCursorFinding: string | undefined;

  constructor(
    parts: WorldStoreParts,
    private readonly hooks: WorldStoreHooks,
  ) {
    const { config } = parts;
    this.config = config;
    this.state = parts.state;
    this.pool = parts.pool;
    this.gpu = parts.gpu;
    this.geo = parts.geo;
    this.slotOwner = parts.slotOwner;
    this.tier = new FaultyTier(new HostTier(config.tierChunks));
    this.drainAccounts = new Array<DrainAccount | undefined>(config.maxRequests).fill(undefined);
    const ledger = new ChunkLedger(this.state, (a) => (this.drainAccounts[a.slot] = a));
    this.ledger = ledger;
    this.planner = new StorePlanner(this.state, this.tier, {
      ...parts.plannerOptions,
      // The final wait's clock is virtual: one ms per decision, so a schedule replays exactly.
      now: () => hooks.decision(),
      observer: ledgerObserver(ledger, {
        chunk: (slot, generation, group, chunk, outcome) => {
          const r = this.slotOwner[slot];
          if (r === undefined || r.handle.generation !== generation) return;
          if (outcome === 'unreachable') this.checkUnreachable(r, group, chunk);
        },
        cursorMoved: (snap, group, from) => this.checkCursorMove(snap, group, from),
      }),
      onPlanPoint: (point, snap) => hooks.onPlanPoint(point, snap),
    });
    this.tierArena = new Uint32Array(
      config.tierChunks * config.blocksPerChunk * this.geo.wordsPerBlock,
    );
    this.dirty = new Uint8Array(config.maxRequests);
    this.starved = new Uint8Array(config.maxRequests);
    this.snapReady = new Int32Array(config.groups.length);
    this.snapCursor = new Int32Array(config.groups.length);
  }

  /**
   * vLLM's reset_cache: the tier is emptied, jobs in flight become stale,
   * every live request not yet drained stores its chunks again from cursor 0.
   * The oracle's memory of the epoch that ended goes with it: which keys the
   * tier held here, and in the chunk ledger (at each restarted request's new
   * store epoch) what it dispatched, dropped or passed and where its cursors
   * were; its hole check then asks the new epoch for every chunk again.
   */
  reset(): void {
    for (const t of this.jobs) this.staleJobs.add(t.job);
    // The chunk ledger starts each restarted request's account over at its new store epoch.
    this.planner.reset();
    this.published.clear();
    for (let s = 0; s < this.dirty.length; s += 1) if (this.slotOwner[s]) this.dirty[s] = 1;
    this.hooks.note(
      STORE,
      A_RESET,
      this.planner.counters.resets,
      this.jobs.length,
      () =>
        `reset: tier emptied, ${this.jobs.length} job(s) in flight become stale, live requests store from cursor 0`,
    );
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

  observeSnapshot(snap: Readonly<RequestSnapshot>): void {
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

  markDirty(r: WorldRequest): void {
    if (r.handle.slot >= 0 && this.slotOwner[r.handle.slot] === r) this.dirty[r.handle.slot] = 1;
  }

  findDirtySlot(): number {
    const n = this.config.maxRequests;
    for (let i = 0; i < n; i += 1) {
      const slot = (this.storeRr + i) % n;
      if (this.dirty[slot] === 1) return slot;
    }
    return -1;
  }

  storeStep(): void {
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
      this.hooks.note(STORE, A_PLAN, -1, slot, () => `plan slot ${slot}: free`);
      return;
    }
    if (job !== undefined && job.generation !== gen) {
      this.hooks.flag(
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
    this.hooks.note(
      STORE,
      A_PLAN,
      r.index,
      job ? job.chunks.length : 0,
      () =>
        `plan slot ${slot} (r${r.spec.requestId}) done ${job ? `-> job ${job.jobId} chunks ${job.chunks.map((c) => `${c.group}:${c.chunk}`).join(',')}` : 'no job'}; cursors [${cursors.join(',')}]${this.starved[slot] ? ' (tier could not allocate)' : ''}${dropped ? ' (dropped for capacity)' : ''}`,
    );
    if (late !== undefined) this.hooks.flag(late[0], late[1]);
    if (r.phase === ENDED && !r.drainChecked) {
      if (this.hooks.drained(r)) {
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
        this.hooks.flag(
          'cursor-within-ready',
          `r${r.spec.requestId} chunk ${c.group}:${c.chunk} dispatched outside [cursor ${this.snapCursor[c.group]}, ready ${this.snapReady[c.group]}) of the snapshot it was planned from`,
        );
      }
      const expected = r.expectedKeys[c.group]![c.chunk];
      if (expected !== c.key) {
        this.hooks.flag(
          'mispairing',
          `r${r.spec.requestId} chunk ${c.group}:${c.chunk} dispatched with key ${c.key.toString(16)}, expected ${expected?.toString(16) ?? 'none (tokens not known)'}`,
        );
      }
      if (this.ledger.storedTwice(job.slot, job.generation, c.group, c.chunk)) {
        this.hooks.flag(
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
      this.hooks.flag(
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
    this.hooks.flag(
      'hole',
      `r${r.spec.requestId} ${statusName(account.status)} with ${tc} token-ready chunk${tc === 1 ? '' : 's'} in group ${hole.group} (ready prefix ${this.snapReady[hole.group]}), but chunk ${hole.chunk} was never stored (nor counted as dropped)`,
    );
  }

  transferStep(): void {
    const t = this.jobs[0];
    if (t === undefined) return;
    const job = t.job;
    if (t.copied < job.chunks.length) {
      const c = job.chunks[t.copied]!;
      copyChunkToTier(this.gpu, this.tierArena, this.geo, c);
      t.copied += 1;
      this.hooks.note(
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
    this.hooks.note(TRANSFER, A_COMPLETE, job.slot, job.jobId, () =>
      failed
        ? `complete job ${job.jobId}: the copy failed, entries discarded, blocks unpinned`
        : `complete job ${job.jobId}: bytes checked, entries published, blocks unpinned`,
    );
    // Invariant 3: the bytes about to be published are the expansion of their key.
    const stale = this.staleJobs.delete(job);
    for (const c of failed ? [] : job.chunks) {
      const positions = c.positions.map((p) => p % this.config.blocksPerChunk);
      if (!tierChunkMatches(this.tierArena, this.geo, c.tierSlot, c.key, positions)) {
        this.hooks.flag(
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
          this.hooks.flag(
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
      this.hooks.flag(
        'hole',
        `job ${job.jobId} completed ${failed ? 'with a failed copy' : 'successfully'}: ${counted} of its ${job.chunks.length} chunks counted as failed`,
      );
    }
    for (let s = 0; s < this.starved.length; s += 1) {
      if (this.starved[s] === 1 && this.slotOwner[s] !== undefined) this.dirty[s] = 1;
    }
  }

  /** Invariant 6 (and 3 once more): nothing leaked, every published entry still verifies. */
  endChecks(fail: (inv: InvariantName, message: string) => boolean): void {
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
}
