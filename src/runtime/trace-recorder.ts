// Per-pass windows of a few traced requests, recorded on the store thread for
// the HTML report (`kvoff simulate --report`). For each planning pass that
// snapshots a traced request, and for each group, it keeps what the rule saw —
// token chunks, keys, complete block chunks, ready, the cursor before and
// after — and what the pass did with its chunks (dispatched, deferred,
// skipped), counted from the planner's observer feed the chunk ledger reads
// (src/ledger.ts), not recomputed from the counts. A pass identical to the
// previous one of the same group is not kept, and every request's list is
// capped, so tracing stays bounded however long the run.
import type { Config } from '../config.js';
import { Status, T_CURSOR } from '../layout.js';
import type { ChunkOutcome } from '../planner.js';
import { offloadableTokens, readyPrefix, tokenChunks } from '../ready.js';
import type { RequestSnapshot } from '../roles/store.js';
import type { SharedState } from '../state.js';

/** Passes kept per traced request (all groups together). */
const TRACE_PASSES_MAX = 50_000;

/**
 * One group's view at one store pass of a traced request. `atMs` is wall-clock
 * (epoch) ms on the store thread; `OffloadRuntime.trace()` makes it relative to
 * the runtime's start.
 */
export interface TracedPass {
  atMs: number;
  group: number;
  generation: number;
  tokenChunks: number;
  keys: number;
  blockChunks: number;
  ready: number;
  cursorBefore: number;
  cursor: number;
  /** Chunks this pass dispatched. */
  stored: number;
  /** Token-ready chunks this pass left for a later one (their keys or blocks lagged). */
  deferred: number;
  /** Token-ready, not ready chunks this pass moved the cursor past without a copy (a legacy policy's holes). */
  skipped: number;
}

export interface TracedRequest {
  requestId: number;
  status: 'running' | 'finished' | 'aborted';
  promptTokens: number;
  passes: TracedPass[];
}

interface Pending {
  slot: number;
  requestId: number;
  generation: number;
  atMs: number;
  groups: Omit<TracedPass, 'cursor' | 'stored' | 'deferred' | 'skipped' | 'atMs' | 'generation'>[];
  /** Per group, from the observer: dispatched, deferred, skipped. */
  stored: Int32Array;
  deferred: Int32Array;
  skipped: Int32Array;
}

interface Live {
  trace: TracedRequest;
  /** Incarnation: bumped when the request is seen preempted or in a new slot generation. */
  incarnation: number;
  slotGeneration: number;
  preempted: boolean;
  last: (TracedPass | undefined)[];
}

export class TraceRecorder {
  private readonly state: SharedState;
  private readonly config: Config;
  private readonly traceRequests: number;
  private readonly clock: () => number;
  /** Per slot: the snapshot of this pass (the last one if it was retried). */
  private readonly pending: (Pending | undefined)[];
  private readonly touched: number[] = [];
  private readonly live = new Map<number, Live>();

  constructor(state: SharedState, traceRequests: number, clock: () => number = Date.now) {
    this.state = state;
    this.config = state.config;
    this.traceRequests = traceRequests;
    this.clock = clock;
    this.pending = new Array<Pending | undefined>(this.config.maxRequests).fill(undefined);
  }

  /** True for the requests this recorder keeps (ids 1..traceRequests). */
  traces(requestId: number): boolean {
    return requestId >= 1 && requestId <= this.traceRequests;
  }

  /** The planner's 'snapshot' plan point. */
  onSnapshot(snap: Readonly<RequestSnapshot>): void {
    if (!this.traces(snap.requestId)) return;
    const groups: Pending['groups'] = [];
    const offloadable = offloadableTokens(snap, this.config);
    const bpc = this.config.blocksPerChunk;
    for (const g of this.config.groups) {
      const tc = tokenChunks(snap, g, offloadable);
      const keys = snap.keyCount[g.index]!;
      const blocks = snap.blockCount[g.index]!;
      groups.push({
        group: g.index,
        tokenChunks: tc,
        keys,
        blockChunks: Math.floor(blocks / bpc),
        ready: readyPrefix(tc, keys, blocks, bpc),
        cursorBefore: snap.cursor[g.index]!,
      });
    }
    if (this.pending[snap.slot] === undefined) this.touched.push(snap.slot);
    const live = this.liveOf(snap);
    this.pending[snap.slot] = {
      slot: snap.slot,
      requestId: snap.requestId,
      generation: live.incarnation,
      atMs: this.clock(),
      groups,
      stored: new Int32Array(this.config.groups.length),
      deferred: new Int32Array(this.config.groups.length),
      skipped: new Int32Array(this.config.groups.length),
    };
  }

  /** The planner observer's chunk outcome (the same feed as the ledger's). */
  onChunk(slot: number, group: number, outcome: ChunkOutcome): void {
    const p = this.pending[slot];
    if (p === undefined) return;
    if (outcome === 'stored') p.stored[group]! += 1;
    else if (outcome === 'skipped') p.skipped[group]! += 1;
  }

  /** The planner observer's deferred chunks of one group at this pass. */
  onDeferred(slot: number, group: number, chunks: number): void {
    const p = this.pending[slot];
    if (p !== undefined) p.deferred[group]! += chunks;
  }

  /** After a planning pass: read the cursors the pass left and keep what changed. */
  endPass(): void {
    for (const slot of this.touched) this.flush(slot);
    this.touched.length = 0;
  }

  /**
   * Removes and returns the trace of an ended request. Called at its drain,
   * inside the final pass: that pass's cursors are final, so it is kept first.
   */
  take(requestId: number, slot: number, status: 'finished' | 'aborted'): TracedRequest | undefined {
    if (this.pending[slot]?.requestId === requestId) this.flush(slot);
    const live = this.live.get(requestId);
    if (live === undefined) return undefined;
    this.live.delete(requestId);
    live.trace.status = status;
    return live.trace;
  }

  /**
   * Removes and returns the traces of requests that have not ended, each up
   * to its last pass (status 'running'): what the store saw before it failed.
   */
  takeLive(): TracedRequest[] {
    this.endPass();
    const out = [...this.live.values()].map((l) => l.trace);
    this.live.clear();
    return out;
  }

  private flush(slot: number): void {
    const p = this.pending[slot];
    if (p === undefined) return;
    this.pending[slot] = undefined;
    const live = this.live.get(p.requestId);
    if (live === undefined) return;
    const { control } = this.state;
    for (const g of p.groups) {
      if (live.trace.passes.length >= TRACE_PASSES_MAX) return;
      const cursor = Atomics.load(control, this.state.storeWord(slot, T_CURSOR + g.group));
      const pass: TracedPass = {
        ...g,
        atMs: p.atMs,
        generation: p.generation,
        cursor,
        stored: p.stored[g.group]!,
        deferred: p.deferred[g.group]!,
        skipped: p.skipped[g.group]!,
      };
      if (sameAs(live.last[g.group], pass)) continue;
      live.last[g.group] = pass;
      live.trace.passes.push(pass);
    }
  }

  private liveOf(snap: Readonly<RequestSnapshot>): Live {
    let live = this.live.get(snap.requestId);
    if (live === undefined) {
      live = {
        trace: {
          requestId: snap.requestId,
          status: 'running',
          promptTokens: snap.promptTokens,
          passes: [],
        },
        incarnation: 0,
        slotGeneration: snap.generation,
        preempted: false,
        last: this.config.groups.map(() => undefined),
      };
      this.live.set(snap.requestId, live);
    }
    const preempted = snap.status === Status.preempted;
    if ((preempted && !live.preempted) || snap.generation !== live.slotGeneration) {
      live.incarnation += 1;
    }
    live.preempted = preempted;
    live.slotGeneration = snap.generation;
    return live;
  }
}

/** True when `b` shows nothing new after `a`: same counts, the cursor did not move, nothing stored. */
function sameAs(a: TracedPass | undefined, b: TracedPass): boolean {
  return (
    a !== undefined &&
    a.generation === b.generation &&
    a.tokenChunks === b.tokenChunks &&
    a.keys === b.keys &&
    a.blockChunks === b.blockChunks &&
    a.cursor === b.cursorBefore &&
    b.cursor === b.cursorBefore &&
    b.stored === 0
  );
}
