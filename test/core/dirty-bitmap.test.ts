// The dirty bitmap lets a pass skip slots nothing was published to. These
// tests check that skipping never changes what is stored: random sequences of
// every role publication (and the store's own reasons to come back: a full
// tier, an ended request whose keys lag) run on two identical LocalOffloads,
// one planning from its dirty bits, the other visiting every slot at every
// pass. Their jobs, cursors and drained marks must be the same at every step.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import type { StoreJob } from '../../src/job.js';
import { DIRTY_SLOTS_PER_WORD, dirtyWordCount, markDirty } from '../../src/layout.js';
import type { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';

const CONFIG: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 4 },
    { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
  ],
  tokensPerHash: 4,
  maxRequests: 3,
  maxBlocksPerRequest: 16,
  gpuBlocks: 256,
  // Small: jobs left in flight fill it, so offers fail and must be retried without a publication.
  tierChunks: 6,
};

type Op =
  | { t: 'open'; prompt: number }
  | { t: 'tokens'; r: number; n: number }
  | { t: 'hash'; r: number; budget: number }
  | { t: 'blocks'; r: number; group: number; n: number }
  | { t: 'null'; r: number; position: number }
  | { t: 'progress'; r: number; computed: number; scheduled: number }
  | { t: 'preempt'; r: number }
  | { t: 'finish'; r: number }
  | { t: 'abort'; r: number }
  | { t: 'settle'; r: number }
  | { t: 'release'; r: number }
  | { t: 'plan' }
  | { t: 'complete'; pick: number };

const r = fc.nat({ max: 2 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ t: fc.constant('open' as const), prompt: fc.integer({ min: 1, max: 24 }) }),
  fc.record({ t: fc.constant('tokens' as const), r, n: fc.integer({ min: 1, max: 6 }) }),
  fc.record({ t: fc.constant('hash' as const), r, budget: fc.integer({ min: 0, max: 3 }) }),
  fc.record({
    t: fc.constant('blocks' as const),
    r,
    group: fc.nat({ max: 1 }),
    n: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({ t: fc.constant('null' as const), r, position: fc.nat({ max: 8 }) }),
  fc.record({
    t: fc.constant('progress' as const),
    r,
    computed: fc.integer({ min: 0, max: 24 }),
    scheduled: fc.integer({ min: 0, max: 8 }),
  }),
  fc.record({ t: fc.constant('preempt' as const), r }),
  fc.record({ t: fc.constant('finish' as const), r }),
  fc.record({ t: fc.constant('abort' as const), r }),
  fc.record({ t: fc.constant('settle' as const), r }),
  fc.record({ t: fc.constant('release' as const), r }),
  fc.constant({ t: 'plan' as const }),
  fc.constant({ t: 'plan' as const }),
  fc.record({ t: fc.constant('complete' as const), pick: fc.nat() }),
);

/** One side of the comparison: a LocalOffload with its open handles and jobs in flight. */
interface Side {
  lo: LocalOffload;
  handles: (RequestHandle | undefined)[];
  inFlight: StoreJob[];
  nextBlock: number;
  nextId: number;
}

async function side(): Promise<Side> {
  return { lo: await local(CONFIG), handles: [], inFlight: [], nextBlock: 1, nextId: 1 };
}

/** Applies one op; returns what it observed (so both sides can be compared). */
function apply(s: Side, op: Op, visitAll: boolean): string {
  const { lo } = s;
  const h = 'r' in op ? s.handles[op.r] : undefined;
  try {
    switch (op.t) {
      case 'open': {
        const at = s.handles.length < 3 ? s.handles.length : s.handles.indexOf(undefined);
        if (at === -1) return 'full';
        s.handles[at] = lo.open({ requestId: s.nextId, promptTokens: tokens(op.prompt, s.nextId) });
        s.nextId += 1;
        return `opened ${at}`;
      }
      case 'plan': {
        if (visitAll) lo.planner.visitAll();
        const jobs = lo.plan();
        s.inFlight.push(...jobs);
        return JSON.stringify(
          jobs.map((j) => [j.slot, j.generation, j.chunks.map((c) => [c.group, c.chunk])]),
        );
      }
      case 'complete': {
        if (s.inFlight.length === 0) return 'none';
        const [job] = s.inFlight.splice(op.pick % s.inFlight.length, 1);
        lo.complete(job!);
        return `completed ${job!.jobId}`;
      }
    }
    if (h === undefined) return 'no handle';
    switch (op.t) {
      case 'tokens':
        lo.appendTokens(h, tokens(op.n, 99));
        break;
      case 'hash':
        lo.hash(h, op.budget);
        break;
      case 'blocks': {
        const ids: number[] = [];
        for (let i = 0; i < op.n; i += 1) ids.push((s.nextBlock++ % 255) + 1);
        lo.appendBlocks(h, op.group, ids);
        break;
      }
      case 'null':
        lo.nullBlock(h, 1, op.position);
        break;
      case 'progress':
        lo.progress(h, op.computed, op.scheduled);
        break;
      case 'preempt':
        lo.preempt(h);
        break;
      case 'finish':
        lo.finish(h);
        break;
      case 'abort':
        lo.abort(h);
        break;
      case 'settle':
        lo.settle(h);
        break;
      case 'release':
        // The host frees an ended request only after its final pass.
        if (!lo.drained(h)) return 'not drained';
        lo.release(h);
        s.handles[op.r] = undefined;
        break;
    }
    return 'ok';
  } catch (error) {
    return `threw ${(error as Error).name}`;
  }
}

function view(s: Side): string {
  return JSON.stringify(
    s.handles.map((h) =>
      h === undefined
        ? null
        : [s.lo.cursor(h, 0), s.lo.cursor(h, 1), s.lo.drained(h), s.lo.groupProgress(h, 0).ready],
    ),
  );
}

describe('dirty bitmap', () => {
  it('a pass from the dirty bits plans exactly what a pass over every slot plans', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 80 }), async (ops) => {
        const bits = await side();
        const all = await side();
        for (const op of ops) {
          const a = apply(bits, op, false);
          const b = apply(all, op, true);
          expect(a, JSON.stringify(op)).toBe(b);
          expect(view(bits)).toBe(view(all));
        }
        // At the end every ended request drains in both after enough passes.
        for (let i = 0; i < 4; i += 1) {
          for (const s of [bits, all]) {
            for (const j of s.inFlight) s.lo.complete(j);
            s.inFlight.length = 0;
          }
          expect(apply(bits, { t: 'plan' }, false)).toBe(apply(all, { t: 'plan' }, true));
        }
        expect(view(bits)).toBe(view(all));
        expect(bits.lo.counters.chunksStored).toBe(all.lo.counters.chunksStored);
        expect(bits.lo.counters.requestsVisited).toBeLessThanOrEqual(
          all.lo.counters.requestsVisited,
        );
      }),
      { numRuns: 150 },
    );
  });

  it('an idle pass visits no slot; one publication makes the next pass visit that slot once', async () => {
    const lo = await local(CONFIG);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, [3, 4]);
    lo.progress(h, 8);
    expect(planAndComplete(lo)).toHaveLength(1);
    const visited = lo.counters.requestsVisited;
    for (let i = 0; i < 5; i += 1) expect(lo.plan()).toEqual([]);
    expect(lo.counters.requestsVisited).toBe(visited);
    expect(Array.from(lo.state.dirty)).toEqual([0]);
    lo.appendTokens(h, [1]);
    expect(lo.state.dirty[0]).toBe(1 << h.slot);
    lo.plan();
    expect(lo.counters.requestsVisited).toBe(visited + 1);
  });

  it('an ended request still gets its final pass when nothing else is published', async () => {
    const lo = await local(CONFIG);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, [3, 4]);
    lo.progress(h, 8);
    planAndComplete(lo);
    lo.plan(); // idle: takes nothing
    for (const end of ['finish', 'abort'] as const) {
      const k = lo.open({ requestId: 2, promptTokens: tokens(8, 2) });
      lo.plan();
      expect(lo.drained(k)).toBe(false);
      lo[end](k);
      lo.plan();
      if (end === 'abort') {
        // Nothing computed, so nothing token-ready: the abort alone is final.
        expect(lo.drained(k), end).toBe(true);
      } else {
        // Its token-ready chunks have no keys or blocks: the final pass waits for them to settle.
        expect(lo.drained(k), end).toBe(false);
        lo.plan();
        expect(lo.drained(k), end).toBe(false);
        lo.hash(k); // keys of every known token come, blocks never will:
        lo.settle(k); // the allocator's last publication for it
        lo.plan();
        expect(lo.drained(k), end).toBe(true);
      }
      lo.release(k);
    }
    lo.finish(h); // everything stored: the finish itself is final
    lo.plan();
    expect(lo.drained(h)).toBe(true);
  });

  it('a failed tier offer comes back at the next pass without a publication', async () => {
    const lo = await local({ ...CONFIG, tierChunks: 2 }); // one request's two chunks
    const a = lo.open({ requestId: 1, promptTokens: tokens(4, 1) });
    const b = lo.open({ requestId: 2, promptTokens: tokens(4, 2) });
    for (const [h, base] of [
      [a, 1],
      [b, 10],
    ] as const) {
      lo.hash(h);
      lo.appendBlocks(h, 0, [base]);
      lo.appendBlocks(h, 1, [base + 1]);
      lo.progress(h, 4);
    }
    const first = lo.plan(); // a's two chunks fill the tier; b's offer fails
    expect(first).toHaveLength(1);
    expect(lo.counters.allocationFailures).toBeGreaterThan(0);
    const failures = lo.counters.allocationFailures;
    lo.plan(); // a's job still in flight: b fails again, visited without any publication
    expect(lo.counters.allocationFailures).toBeGreaterThan(failures);
    for (const j of first) lo.complete(j);
    // Evicting a's entry makes room: b's chunk goes out with no publication in between.
    const later = lo.plan();
    expect(later.map((j) => j.slot)).toEqual([b.slot]);
  });

  it('a planner attached to state that already holds requests visits every slot at its first pass', async () => {
    const lo = await local(CONFIG);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, [3, 4]);
    lo.progress(h, 8);
    lo.state.dirty.fill(0); // as if an earlier planner had taken the bits
    const { StorePlanner } = await import('../../src/planner.js');
    const { HostTier } = await import('../../src/tier/host-tier.js');
    const fresh = new StorePlanner(lo.state, new HostTier(8));
    expect(fresh.pass()).toHaveLength(1);
  });

  it('maps slot s to bit s % 32 of word s / 32', () => {
    expect(DIRTY_SLOTS_PER_WORD).toBe(32);
    expect(dirtyWordCount(1)).toBe(1);
    expect(dirtyWordCount(32)).toBe(1);
    expect(dirtyWordCount(33)).toBe(2);
    const words = new Int32Array(new SharedArrayBuffer(3 * 4));
    for (const slot of [0, 31, 32, 95]) markDirty(words, slot);
    expect(Array.from(words)).toEqual([1 | (1 << 31), 1, 1 << 31]);
  });
});
