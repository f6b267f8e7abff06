// The chunk ledger: what the store path did with every chunk of every request
// generation, kept from the planner's observer (PlannerObserver) on the store
// role's thread. It is the one definition behind every hole, double-store and
// cursor check: the runtime's stats() and verify(), each request's summary,
// the per-pass figures of the HTML report and both fuzz targets' oracles read
// it; nothing else keeps a second account of chunks.
//
// It is the code's own bookkeeping, fed by the decisions of the code under
// test: it shows that no chunk was passed without an outcome, none stored twice
// in one generation, and cursors only moved forward and within the ready
// prefix they were read with. Whether the rule itself is right is another
// question (docs/fuzzing.md says which checks share the code's assumptions).
import type { ChunkOutcome, PlannerObserver } from './planner.js';
import type { StoreJob } from './job.js';
import { S_HIT_CHUNKS, T_EPOCH } from './layout.js';
import { offloadableTokens, tokenChunks } from './ready.js';
import type { RequestSnapshot } from './roles/store.js';
import type { SharedState } from './state.js';

// Per chunk of the current generation of a slot.
/** An outcome was reported: stored, present, null, unreachable, dropped or unready. */
const COVERED = 1;
/** Dispatched in a job whose copy has not failed. */
const STORED = 2;
/** Token-ready and not ready at some pass (a later store counts in deferredThenStored). */
const DEFERRED = 4;
/** Dispatched twice in this generation. */
const DOUBLE = 8;

/** Where a chunk is, for a finding's message. */
interface ChunkAt {
  readonly slot: number;
  readonly generation: number;
  readonly group: number;
  readonly chunk: number;
}

/**
 * A cursor that broke the rule: it went back (`to` < `from`: the ledger last
 * saw it at `from`, a pass read `to`), or a pass moved it from `from` to `to`
 * past the ready prefix `ready` of the snapshot it planned from.
 */
export interface CursorFinding {
  readonly slot: number;
  readonly generation: number;
  readonly group: number;
  readonly from: number;
  readonly to: number;
  /** -1 for a move back. */
  readonly ready: number;
}

/** Cursor findings kept until a driver takes them (the counts go on). */
const CURSOR_FINDINGS_MAX = 16;

/** One request generation's account, taken at its final pass (before the drained mark). */
export interface DrainAccount {
  readonly slot: number;
  readonly generation: number;
  readonly requestId: number;
  readonly status: number;
  /** Chunks this generation dispatched and whose copies did not fail. */
  readonly chunksStored: number;
  /** Chunk-passes deferred (a chunk waiting over several publications counts each time). */
  readonly chunksDeferred: number;
  /** Chunks token-ready when the request ended, summed over groups. */
  readonly tokenChunks: number;
  /** Per group: chunks token-ready when it ended. */
  readonly tokenChunksByGroup: readonly number[];
  /**
   * Of those, chunks accounted for without this generation storing them:
   * loaded at admission, already in the tier, slid out of the window, not
   * reachable by any hit, or counted as dropped (for capacity, or never ready).
   */
  readonly chunksCounted: number;
  /**
   * Chunks token-ready when it ended (or passed by its cursor) with no
   * outcome: neither stored nor counted. Whether their keys or block IDs were
   * ever published does not matter: lag must not hide a hole.
   */
  readonly holes: number;
  /** The first hole in group then chunk order, if any. */
  readonly firstHole: ChunkAt | undefined;
  readonly doubleStores: number;
}

export type DrainListener = (account: DrainAccount) => void;

/** What a driver reads of the observer's feed beside the ledger (a trace recorder, an oracle's own check). */
export type LedgerTap = Pick<PlannerObserver, 'chunk' | 'deferred' | 'cursorMoved'>;

/**
 * The planner's observer: the ledger, and `tap` after it on the same chunks
 * and deferrals; every driver feeds its ledger this way, so none forwards
 * the ledger's events by hand (and none can forget one).
 */
export function ledgerObserver(ledger: ChunkLedger, tap?: LedgerTap): PlannerObserver {
  if (tap === undefined) return ledger;
  const { chunk, deferred, cursorMoved } = tap;
  return {
    chunk: (slot, generation, group, c, outcome) => {
      ledger.chunk(slot, generation, group, c, outcome);
      chunk?.(slot, generation, group, c, outcome);
    },
    deferred: (slot, generation, group, from, to) => {
      ledger.deferred(slot, generation, group, from, to);
      deferred?.(slot, generation, group, from, to);
    },
    cursorMoved: (snap, group, from, ready) => {
      ledger.cursorMoved(snap, group, from, ready);
      cursorMoved?.(snap, group, from, ready);
    },
    draining: (snap) => ledger.draining(snap),
    failed: (job) => ledger.failed(job),
  };
}

export class ChunkLedger implements PlannerObserver {
  /** Holes over every drained generation. */
  holes = 0;
  /** Chunks dispatched a second time in one generation. */
  doubleStores = 0;
  /** Chunks deferred at some pass and stored by a later one (counted once each). */
  deferredThenStored = 0;
  /** Cursors seen to go back. */
  cursorsBack = 0;
  /** Cursor moves past the ready prefix of their snapshot. */
  cursorsPastReady = 0;

  private readonly state: SharedState;
  private readonly groups: number;
  private readonly onDrain: DrainListener | undefined;
  // Per slot: the generation the rows below belong to.
  private readonly slotGeneration: Int32Array;
  /** Per slot: the store epoch the rows below belong to (a reset starts a new one: the rows start over). */
  private readonly slotEpoch: Int32Array;
  /** Per slot: a reset came during this generation, so its admission hit is no longer in the tier. */
  private readonly hitVoid: Uint8Array;
  /** Per slot and group: the chunk flags of that generation. */
  private readonly coverage: Uint8Array[];
  /** Per slot and group: chunks below this are already flagged DEFERRED. */
  private readonly markedTo: Int32Array;
  /** Per slot and group: the cursor as the ledger last saw it move. */
  private readonly cursor: Int32Array;
  private readonly slotStored: Int32Array;
  private readonly slotDeferred: Int32Array;
  private readonly slotDoubles: Int32Array;
  private cursorFindings: CursorFinding[] = [];

  constructor(state: SharedState, onDrain?: DrainListener) {
    const { config } = state;
    this.state = state;
    this.groups = state.groupCount;
    this.onDrain = onDrain;
    this.slotGeneration = new Int32Array(config.maxRequests);
    this.slotEpoch = new Int32Array(config.maxRequests);
    this.hitVoid = new Uint8Array(config.maxRequests);
    this.coverage = Array.from(
      { length: config.maxRequests * this.groups },
      () => new Uint8Array(config.maxChunksPerRequest),
    );
    this.markedTo = new Int32Array(config.maxRequests * this.groups);
    this.cursor = new Int32Array(config.maxRequests * this.groups);
    this.slotStored = new Int32Array(config.maxRequests);
    this.slotDeferred = new Int32Array(config.maxRequests);
    this.slotDoubles = new Int32Array(config.maxRequests);
  }

  // --- the planner's observer ---

  chunk(
    slot: number,
    generation: number,
    group: number,
    chunk: number,
    outcome: ChunkOutcome,
  ): void {
    this.adopt(slot, generation);
    // A legacy policy's pass over a chunk that was not ready: no outcome, so a hole at the end.
    if (outcome === 'skipped') return;
    const cov = this.coverage[slot * this.groups + group]!;
    const was = cov[chunk]!;
    if (outcome !== 'stored') {
      cov[chunk] = was | COVERED;
      return;
    }
    if ((was & STORED) !== 0) {
      this.doubleStores += 1;
      this.slotDoubles[slot]! += 1;
      cov[chunk] = was | DOUBLE;
    }
    if ((was & DEFERRED) !== 0) this.deferredThenStored += 1;
    this.slotStored[slot]! += 1;
    cov[chunk] = cov[chunk]! | STORED | COVERED;
  }

  deferred(slot: number, generation: number, group: number, from: number, to: number): void {
    this.adopt(slot, generation);
    const i = slot * this.groups + group;
    const cov = this.coverage[i]!;
    this.slotDeferred[slot]! += to - from;
    const end = Math.min(to, cov.length);
    for (let c = Math.max(from, this.markedTo[i]!); c < end; c += 1) cov[c] = cov[c]! | DEFERRED;
    this.markedTo[i] = Math.max(this.markedTo[i]!, end);
  }

  cursorMoved(snap: Readonly<RequestSnapshot>, group: number, from: number, ready: number): void {
    this.adopt(snap.slot, snap.generation);
    // The pass read the cursor below where it last moved to: something else wrote it.
    this.checkCursor(snap, group, from);
    const to = snap.cursor[group]!;
    if (to > from && to > ready) {
      this.cursorsPastReady += 1;
      this.find({ slot: snap.slot, generation: snap.generation, group, from, to, ready });
    }
    this.cursor[snap.slot * this.groups + group] = to;
  }

  /**
   * The final pass of an ended request, before its drained mark (its blocks
   * still held, its slot not reusable yet): counts its holes and hands its
   * account to the listener.
   */
  draining(snap: Readonly<RequestSnapshot>): void {
    const { state } = this;
    const { config } = state;
    const slot = snap.slot;
    this.adopt(slot, snap.generation);
    let holes = 0;
    let tokenReady = 0;
    let counted = 0;
    let firstHole: ChunkAt | undefined;
    const hole = (group: number, chunk: number) => {
      holes += 1;
      firstHole ??= { slot, generation: snap.generation, group, chunk };
    };
    const byGroup: number[] = [];
    const offloadable = offloadableTokens(snap, config);
    for (let g = 0; g < this.groups; g += 1) {
      // After a reset the admission hit is gone from the tier: those chunks count as any other.
      const hit =
        this.hitVoid[slot] === 1
          ? 0
          : Atomics.load(state.control, state.schedulerWord(slot, S_HIT_CHUNKS + g));
      const cov = this.coverage[slot * this.groups + g]!;
      const ready = tokenChunks(snap, config.groups[g]!, offloadable);
      byGroup.push(ready);
      const end = Math.min(ready, cov.length);
      tokenReady += Math.max(end, 0);
      counted += Math.min(hit, end); // loaded from the tier at admission
      for (let c = hit; c < end; c += 1) {
        const was = cov[c]!;
        if ((was & COVERED) === 0) hole(g, c);
        else if ((was & STORED) === 0) counted += 1;
      }
      // Passed by the cursor beyond the end's token chunks (an abort's horizon shrank): still checked.
      for (let c = Math.max(hit, end); c < Math.min(snap.cursor[g]!, cov.length); c += 1)
        if ((cov[c]! & COVERED) === 0) hole(g, c);
      this.checkCursor(snap, g, snap.cursor[g]!);
    }
    this.holes += holes;
    this.onDrain?.({
      slot,
      generation: snap.generation,
      requestId: snap.requestId,
      status: snap.status,
      chunksStored: this.slotStored[slot]!,
      chunksDeferred: this.slotDeferred[slot]!,
      tokenChunks: tokenReady,
      tokenChunksByGroup: byGroup,
      chunksCounted: counted,
      holes,
      firstHole,
      doubleStores: this.slotDoubles[slot]!,
    });
  }

  /**
   * A store job whose copy failed (StorePlanner.complete with success false):
   * its chunks are not stored. They were counted in chunksTransferFailed, and
   * the request's account shows them as counted, not stored; storing one of
   * them again is no double store. Only while the job's generation is the slot's.
   */
  failed(job: StoreJob): void {
    if (this.slotGeneration[job.slot] !== job.generation) return;
    for (const chunk of job.chunks) {
      const cov = this.coverage[job.slot * this.groups + chunk.group]!;
      if ((cov[chunk.chunk]! & STORED) === 0) continue;
      cov[chunk.chunk] = cov[chunk.chunk]! & ~STORED;
      this.slotStored[job.slot]! -= 1;
    }
  }

  // --- the drivers' side ---

  /** True when this chunk of the slot's current generation was dispatched twice. */
  storedTwice(slot: number, generation: number, group: number, chunk: number): boolean {
    if (this.slotGeneration[slot] !== generation) return false;
    return (this.coverage[slot * this.groups + group]![chunk]! & DOUBLE) !== 0;
  }

  /**
   * Cursor findings since the last call, oldest first (at most
   * CURSOR_FINDINGS_MAX; cursorsBack and cursorsPastReady count them all).
   */
  takeCursorFindings(): CursorFinding[] {
    const out = this.cursorFindings;
    if (out.length > 0) this.cursorFindings = [];
    return out;
  }

  /** A cursor as a pass read it (`now`) against where the ledger last saw it move. */
  private checkCursor(snap: Readonly<RequestSnapshot>, group: number, now: number): void {
    const seen = this.cursor[snap.slot * this.groups + group]!;
    if (now >= seen) return;
    this.cursorsBack += 1;
    this.find({
      slot: snap.slot,
      generation: snap.generation,
      group,
      from: seen,
      to: now,
      ready: -1,
    });
  }

  private find(f: CursorFinding): void {
    if (this.cursorFindings.length < CURSOR_FINDINGS_MAX) this.cursorFindings.push(f);
  }

  /**
   * The rows of `slot` start over for a new generation, and for a new store
   * epoch of the same one (a reset restarted the request at cursor 0: its
   * chunks are stored again, its admission hit is gone; its counts go on).
   */
  private adopt(slot: number, generation: number): void {
    const { state } = this;
    // The store line is the store role's own, and the ledger runs on its thread: a plain read.
    const epoch = state.control[state.storeWord(slot, T_EPOCH)]!;
    const fresh = this.slotGeneration[slot] !== generation;
    if (!fresh && this.slotEpoch[slot] === epoch) return;
    this.slotGeneration[slot] = generation;
    this.slotEpoch[slot] = epoch;
    this.hitVoid[slot] = fresh ? 0 : 1;
    for (let g = 0; g < this.groups; g += 1) {
      const i = slot * this.groups + g;
      this.coverage[i]!.fill(0);
      this.markedTo[i] = 0;
      this.cursor[i] = 0;
    }
    if (!fresh) return;
    this.slotStored[slot] = 0;
    this.slotDeferred[slot] = 0;
    this.slotDoubles[slot] = 0;
  }
}
