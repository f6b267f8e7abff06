// The runtime fuzz target's checks beside the chunk ledger's: each lookup
// answer (lookup-oracle.ts, and no byte from before a reset), each drained
// request (its holes and double stores, and the specification's count of its
// token-ready chunks), each cursor move (the specification's bound beside the
// ledger's), and after close() the runtime's leak report and every tier
// entry's bytes; with ranks, that no entry is readable before every rank's
// acknowledgement. Also the draft-rewrite fault. RuntimeWorld (runtime-world.ts)
// raises what they find.
import {
  A_BLOCK_COUNT,
  S_COMPUTED_TOKENS,
  S_GENERATION,
  S_HIT_CHUNKS,
  S_MAX_OFFLOAD_TOKENS,
  S_NUM_TOKENS,
  S_PROMPT_TOKENS,
  S_SCHEDULED_TOKENS,
  S_STATUS,
  Status,
  T_CURSOR,
} from '../layout.js';
import { describeLeak, leakReportOf } from '../leaks.js';
import type { RequestSnapshot } from '../roles/store.js';
import type { RuntimeViews } from '../runtime/buffers.js';
import type { StoreLoop } from '../runtime/store-loop.js';
import type { DrainedRequest } from '../runtime/store-loop.js';
import type { LookupAnswered } from '../runtime/store-loads.js';
import { budgetWasUsed, lookupAnswerViolation } from './lookup-oracle.js';
import type { InvariantName } from './oracle.js';
import type { RankAckRelay } from './rank-acks.js';
import { specCursorBound, specTokenChunks } from './spec/ready-spec.js';

export class RuntimeChecks {
  /** The first cursor move of the store step past the specification's bound (raised after the step). */
  private specCursorFinding: string | undefined;
  /** Chunks counted as dropped up to the last drained request (the specification's check reads the rest). */
  private dropsSeen = 0;
  /** Hits the recompute budget allowed where a budget of 0 would have asked again. */
  budgetedHits = 0;

  constructor(
    private readonly views: RuntimeViews,
    /** The store loop (built after the checks its options call). */
    private readonly store: () => StoreLoop,
    /** Raises a violation from inside a step (unless other invariants are watched). */
    private readonly flag: (inv: InvariantName, message: string) => void,
  ) {}

  /** Oracle 7 at the moment of each lookup answer (see lookup-oracle.ts). */
  lookup(a: LookupAnswered, loadWhileWriting: boolean): void {
    const v = lookupAnswerViolation(this.views, a, this.store().tier, loadWhileWriting);
    if (v !== undefined) this.flag(v.invariant, v.message);
    if (budgetWasUsed(this.views.config, a)) this.budgetedHits += 1;
    // Oracle 8: what a hit serves became readable after the last reset.
    for (const l of a.locked) {
      const since = this.store().readableSince(l.key);
      if (since !== undefined && since !== this.store().resetCount) {
        this.flag(
          'reset',
          `a lookup after reset ${this.store().resetCount} hit chunk ${l.group}:${l.chunk} (key ${l.key.toString(16)}), readable since reset ${since}: a byte stored before a reset served after it`,
        );
      }
    }
  }

  /**
   * The store's drained event, sent in the request's final pass just before
   * its drained mark (its blocks still held): the chunk ledger's account of
   * it, then the specification's (it shares no code with the rule).
   */
  drained(d: DrainedRequest): void {
    if (d.holes > 0) {
      const at = d.firstHole
        ? ` (first: group ${d.firstHole.group} chunk ${d.firstHole.chunk})`
        : '';
      this.flag(
        'hole',
        `r${d.requestId} ${d.status}: ${d.holes} token-ready chunk(s) neither stored nor counted as dropped when it drained${at}`,
      );
    }
    if (d.doubleStores > 0) {
      this.flag('double-store', `r${d.requestId}: ${d.doubleStores} chunk(s) dispatched twice`);
    }
    this.endedCursor(d);
  }

  /**
   * The specification's check of an ended request, just before the store
   * marks it drained (its blocks still held): every chunk whose tokens were
   * ready when it ended is below the final cursor, or counted as dropped (for
   * capacity, or unready after the bound).
   */
  private endedCursor(d: DrainedRequest): void {
    const { state, config } = this.views;
    const c = state.control;
    const w = (f: number) => Atomics.load(c, state.schedulerWord(d.slot, f));
    const facts = {
      status: w(S_STATUS),
      promptTokens: w(S_PROMPT_TOKENS),
      numTokens: w(S_NUM_TOKENS),
      computedTokens: w(S_COMPUTED_TOKENS),
      scheduledTokens: w(S_SCHEDULED_TOKENS),
      maxOffloadTokens: w(S_MAX_OFFLOAD_TOKENS),
    };
    const counters = this.store().planner.counters;
    const drops = counters.chunksDroppedForCapacity + counters.chunksDroppedUnready;
    const counted = drops - this.dropsSeen;
    this.dropsSeen = drops;
    let missing = 0;
    const where: string[] = [];
    for (const g of config.groups) {
      const ready = specTokenChunks(config, facts, g);
      const cursor = Atomics.load(c, state.storeWord(d.slot, T_CURSOR + g.index));
      if (cursor < ready) {
        missing += ready - cursor;
        where.push(`group ${g.index}: cursor ${cursor} of ${ready} token-ready chunks`);
      }
    }
    if (missing > counted) {
      this.flag(
        'hole',
        `r${d.requestId} ${d.status}: ${missing - counted} token-ready chunk(s) neither stored nor counted as dropped when it drained (${where.join('; ')})`,
      );
    }
  }

  /**
   * The specification's check of a cursor move (beside the ledger's, which
   * reads the planner's own ready prefix): never past the ready prefix of the
   * snapshot the pass read, recomputed from that snapshot's facts by
   * spec/ready-spec.ts, nor past the token-ready chunks once it ended.
   */
  cursorMove(snap: Readonly<RequestSnapshot>, group: number, from: number): void {
    if (this.specCursorFinding !== undefined) return;
    const { config } = this.views;
    const g = config.groups[group]!;
    const bound = specCursorBound(config, snap, g, snap.keyCount[group]!, snap.blockCount[group]!);
    const to = snap.cursor[group]!;
    if (to > from && to > bound) {
      this.specCursorFinding = `slot ${snap.slot} group ${group}: cursor advanced ${from} -> ${to} past ${bound}, the specification's bound for the snapshot it was read from (keys ${snap.keyCount[group]}, blocks ${snap.blockCount[group]}, tokens ${snap.computedTokens}+${snap.scheduledTokens}/${snap.numTokens})`;
    }
  }

  /** The ledger's and the specification's cursor findings of the store step that just ran. */
  cursors(): void {
    const spec = this.specCursorFinding;
    this.specCursorFinding = undefined;
    const f = this.store().ledger.takeCursorFindings()[0];
    if (f === undefined) {
      if (spec !== undefined) this.flag('cursor-within-ready', spec);
      return;
    }
    if (f.to < f.from) {
      this.flag(
        'cursor-monotonic',
        `slot ${f.slot} group ${f.group}: cursor moved back ${f.from} -> ${f.to} in generation ${f.generation}`,
      );
    } else {
      this.flag(
        'cursor-within-ready',
        `slot ${f.slot} group ${f.group}: cursor advanced ${f.from} -> ${f.to} past the ready prefix ${f.ready} it was read with`,
      );
    }
  }

  /** Oracle 9: no entry of a store job readable before the store had every rank's acknowledgement. */
  rankAcks(acks: RankAckRelay): void {
    const early = acks.publishedEarly(this.store().tier);
    if (early === undefined) return;
    this.flag(
      'rank-ack',
      `store job ${early.job.jobId}: key ${early.key.toString(16)} readable after ${early.delivered} of ${this.views.config.ranks} rank acknowledgements`,
    );
  }

  /**
   * After close(): the runtime's leak report from the roles' final figures,
   * all zero, then every tier entry's bytes; the first finding, if any.
   */
  afterClose(
    scheduler: Record<string, number>,
    allocator: Record<string, number>,
  ): [InvariantName, string] | undefined {
    const store = this.store();
    const report = leakReportOf(this.views.state, { scheduler, allocator, store: store.final() });
    const leak = describeLeak(report, 'after close()');
    if (leak !== undefined) return ['leak', leak];
    const v = store.verify();
    if (v.mismatches > 0) {
      return [
        'mispairing',
        `tier entries ${v.mismatchKeys.join(',')} do not hold their key's bytes at close()`,
      ];
    }
    return undefined;
  }
}

/** EAGLE: a draft pass rewrites the blocks of chunks the engine has not written yet. */
export function rewriteTrailingChunks(views: RuntimeViews): void {
  const { state, gpu, geometry, config } = views;
  const c = state.control;
  const bpc = config.blocksPerChunk;
  for (let slot = 0; slot < config.maxRequests; slot += 1) {
    if ((Atomics.load(c, state.schedulerWord(slot, S_GENERATION)) & 1) === 0) continue;
    const status = Atomics.load(c, state.schedulerWord(slot, S_STATUS));
    if (status !== Status.running) continue;
    const horizon = Math.min(
      Atomics.load(c, state.schedulerWord(slot, S_COMPUTED_TOKENS)) +
        Atomics.load(c, state.schedulerWord(slot, S_SCHEDULED_TOKENS)),
      Atomics.load(c, state.schedulerWord(slot, S_NUM_TOKENS)),
    );
    for (const g of config.groups) {
      const hit = Atomics.load(c, state.schedulerWord(slot, S_HIT_CHUNKS + g.index));
      const count = Atomics.load(c, state.allocatorWord(slot, A_BLOCK_COUNT + g.index));
      // The trailing chunk: the first one the written tokens do not cover.
      const chunk = Math.max(hit, Math.floor(horizon / g.tokensPerChunk));
      for (let p = chunk * bpc; p < Math.min(count, (chunk + 1) * bpc); p += 1) {
        const b = state.blocks[state.blockBase(slot, g.index) + p]!;
        if (b === 0) continue;
        gpu.fill(0xdead0000 + p, b * geometry.wordsPerBlock, (b + 1) * geometry.wordsPerBlock);
      }
    }
  }
}
