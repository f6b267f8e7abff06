// vLLM's own store-path scenarios, replayed against kvoff's public API.
//
// Each test is named after the vLLM unit test it mirrors, in
// tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py (the
// cancellation tests live in a sibling module of the same folder), and drives
// LocalOffload the way vLLM's request runner drives the connector: one
// `schedule` per engine step (block IDs allocated for the scheduled tokens,
// progress published, one store pass), then the step's sampled token appended
// and hashed. A store job made at step N is completed at step N + 1, as the
// runner's mock transfers do, unless a test keeps it in flight. Runs marked
// "async scheduling" hash each sampled token one step late, as vLLM's async
// scheduler sees it. Every pass also checks, through the planner's observer,
// that no cursor moved over a chunk without accounting for it (stored,
// present, null, unreachable, dropped) and that no chunk was stored twice.
//
// vLLM's runner uses a MagicMock manager whose prepare_store "stores" every
// key it is told to, present or not; kvoff's tier is a real one that skips
// keys it already holds. Where that changes what is copied (not what is
// offered), the test asserts the offer as vLLM does and the copy as kvoff's
// tier does, and says so.
import { describe, expect, it } from 'vitest';
import type { ConfigInput, GroupInput } from '../../src/config.js';
import { InvalidArgumentError, IllegalTransitionError } from '../../src/errors.js';
import type { StoreJob } from '../../src/job.js';
import type { LocalOffload, LocalOffloadOptions } from '../../src/local.js';
import { FINAL_STORE_ATTEMPTS_MAX } from '../../src/planner.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { HostTier } from '../../src/tier/host-tier.js';
import type { LookupState, PrepareStoreResult } from '../../src/tier/types.js';
import { chunkIds, local, range } from '../helpers/local.js';

/** The token vLLM's runner ends a request with; any value works, it is only appended. */
const EOS = 7;

const same = (n: number, token = 0): number[] => new Array<number>(n).fill(token);

/**
 * vLLM's MockOffloadingManager, as far as the store path sees it: a real LRU
 * host tier whose prepare_store answer a test can script (everything offered,
 * a subset, nothing to store, or None = cannot allocate), and which records
 * every offer, touch and lookup.
 */
type Answer = 'all' | 'none' | 'empty' | ((keys: readonly bigint[]) => readonly bigint[]);

class ScriptedTier extends HostTier {
  answer: Answer = 'all';
  offers: bigint[][] = [];
  touches: bigint[][] = [];
  lookups = 0;

  override prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    this.offers.push([...keys]);
    const a = this.answer;
    if (a === 'none')
      return { ok: false, reason: 'cannot-allocate', needed: keys.length, evictable: 0 };
    if (a === 'empty') return { ok: true, keysToStore: [], slots: [], evicted: [] };
    return super.prepareStore(a === 'all' ? keys : a(keys));
  }
  override touch(keys: readonly bigint[]): void {
    this.touches.push([...keys]);
    super.touch(keys);
  }
  override state(key: bigint): LookupState {
    this.lookups += 1;
    return super.state(key);
  }
}

function config(groups: GroupInput[], extra: Partial<ConfigInput> = {}): ConfigInput {
  return {
    groups,
    tokensPerHash: 4,
    maxRequests: 8,
    maxBlocksPerRequest: 128,
    gpuBlocks: 4096,
    tierChunks: 512,
    ...extra,
  };
}

const FULL4: GroupInput = { kind: 'full', tokensPerBlock: 4 };

/** A request driven step by step as vLLM's scheduler drives one. */
class Req {
  computed = 0;
  private numTokens: number;
  constructor(
    readonly engine: Engine,
    readonly h: RequestHandle,
    promptLength: number,
    /** Tokens one step may schedule (vLLM's chunked-prefill budget). */
    readonly budget: number,
  ) {
    this.numTokens = promptLength;
  }

  /**
   * One engine step scheduling `n` tokens: windowed groups drop the blocks
   * that slid out (vLLM's remove_skipped_blocks, before allocation), blocks
   * are allocated for computed + n tokens, progress is published, one store
   * pass runs. Returns the pass's jobs.
   */
  schedule(n: number): StoreJob[] {
    const { lo } = this.engine;
    this.engine.dropSlidOut(this.h, this.computed);
    for (let g = 0; g < lo.config.groups.length; g += 1) {
      const need = Math.ceil((this.computed + n) / lo.config.groups[g]!.tokensPerBlock);
      const have = lo.groupProgress(this.h, g).blocks;
      if (need > have) lo.appendBlocks(this.h, g, this.engine.fresh(need - have));
    }
    lo.progress(this.h, this.computed, n);
    const jobs = this.engine.pass();
    if (this.unhashed) this.hash();
    this.computed += n;
    return jobs;
  }

  /** The sampled token lands (and is hashed, as vLLM hashes on append). */
  sample(token: number): void {
    this.engine.lo.appendTokens(this.h, [token]);
    this.numTokens += 1;
    if (this.engine.asyncScheduling) this.unhashed = true;
    else this.hash();
  }

  private unhashed = false;
  private hash(): void {
    this.engine.lo.hash(this.h);
    this.unhashed = false;
  }

  /**
   * vLLM's `runner.run(decoded_tokens=...)`: each step schedules what is not
   * computed (up to the budget) and, once the request has computed all its
   * tokens, samples the next decoded token; EOS finishes the request and the
   * next step's pass is its final one. Returns every job planned meanwhile.
   */
  run(decoded: readonly number[]): StoreJob[] {
    const jobs: StoreJob[] = [];
    let i = 0;
    for (let steps = 0; i < decoded.length; steps += 1) {
      if (steps > 10_000) throw new Error('run does not end');
      jobs.push(...this.schedule(Math.min(this.numTokens - this.computed, this.budget)));
      if (this.computed < this.numTokens) continue; // a chunk of a longer prefill: nothing sampled
      const token = decoded[i++]!;
      this.sample(token);
      if (token === EOS) {
        this.hash(); // vLLM's request_finished picks up the final hash
        this.engine.lo.finish(this.h);
        jobs.push(...this.engine.pass());
      }
    }
    return jobs;
  }

  get tokens(): number {
    return this.numTokens;
  }
}

class Engine {
  private nextBlock = 1;
  /** Freed block IDs, handed out again first (a tight GPU pool). */
  readonly freed: number[] = [];
  /** Jobs planned and not completed; completed at the start of the next pass. */
  inFlight: StoreJob[] = [];
  readonly completed: StoreJob[] = [];
  /** Complete each pass's jobs at the next pass (vLLM's runner); false keeps them in flight. */
  completeTransfers = true;
  /** Drop sliding-window blocks as they slide out, as vLLM's SlidingWindowManager does. */
  slideWindows = true;
  /**
   * vLLM's async scheduling: the next step is scheduled before the last
   * sampled token's hash lands, so a chunk completed by that token is
   * token-ready one pass before its key (the keys lag by one step).
   */
  asyncScheduling = false;

  constructor(
    readonly lo: LocalOffload,
    readonly tier: ScriptedTier,
  ) {}

  /** What happened to each chunk the cursor passed, by "slot:generation:group:chunk". */
  private readonly outcomes = new Map<string, string[]>();
  /** Requests whose cursors every pass checks (opened here, not yet released). */
  private readonly live = new Set<Req>();

  /** Resets so far: a chunk may be stored once per request generation and reset epoch. */
  resets = 0;
  /** Final passes (vLLM's on_request_finished), by "slot:generation". */
  readonly drains = new Map<string, number>();

  static async create(input: ConfigInput, options: LocalOffloadOptions = {}): Promise<Engine> {
    const tier = new ScriptedTier(input.tierChunks ?? 512);
    const made: { engine?: Engine } = {};
    const lo = await local(input, {
      ...options,
      tier,
      observer: {
        chunk: (slot, generation, group, chunk, outcome) =>
          made.engine!.record(
            `${slot}:${generation}:${group}:${chunk}@${made.engine!.resets}`,
            outcome,
          ),
        draining: (snap) => {
          const k = `${snap.slot}:${snap.generation}`;
          made.engine!.drains.set(k, (made.engine!.drains.get(k) ?? 0) + 1);
        },
      },
    });
    made.engine = new Engine(lo, tier);
    return made.engine;
  }

  private record(chunk: string, outcome: string): void {
    const seen = this.outcomes.get(chunk) ?? [];
    // Nothing stored twice in one request generation (a refused offer reports nothing).
    if (outcome === 'stored' && seen.includes('stored')) throw new Error(`${chunk} stored twice`);
    seen.push(outcome);
    this.outcomes.set(chunk, seen);
  }

  /**
   * `n` block IDs: freed ones first, newest first, as a tight pool hands them
   * out; never one still pinned by a copy in flight (kvoff's pool quarantines
   * those, where vLLM flushes the copy: see test_request_preemption).
   */
  fresh(n: number): number[] {
    return Array.from({ length: n }, () => {
      for (let i = this.freed.length - 1; i >= 0; i -= 1) {
        const id = this.freed[i]!;
        if (Atomics.load(this.lo.state.pins, id) === 0) return this.freed.splice(i, 1)[0]!;
      }
      return this.nextBlock++;
    });
  }

  /** Opens a request the way vLLM adds one: hashed at once (its keys exist while it is queued). */
  open(requestId: number, prompt: readonly number[], budget = 1 << 20, hitChunks?: number[]): Req {
    const h = this.lo.open({
      requestId,
      promptTokens: prompt,
      ...(hitChunks ? { hitChunks } : {}),
    });
    this.lo.hash(h);
    return this.track(h, prompt.length, budget);
  }

  /** Drives (and checks the cursors of) a request opened by the caller. */
  track(h: RequestHandle, promptLength: number, budget = 1 << 20): Req {
    const r = new Req(this, h, promptLength, budget);
    this.live.add(r);
    return r;
  }

  /**
   * One store pass; the previous pass's jobs complete first (when transfers
   * complete). Checks that every chunk a cursor moved over was accounted for
   * (stored, present, null, unreachable or counted as dropped): the cursor
   * never skips an unstored chunk.
   */
  pass(): StoreJob[] {
    if (this.completeTransfers) this.completeAll();
    const groups = this.lo.config.groups.length;
    const before = [...this.live].map((r) => range(0, groups).map((g) => this.lo.cursor(r.h, g)));
    const jobs = this.lo.plan();
    [...this.live].forEach((r, i) => {
      for (let g = 0; g < groups; g += 1) {
        for (let c = before[i]![g]!; c < this.lo.cursor(r.h, g); c += 1) {
          const chunk = `${r.h.slot}:${r.h.generation}:${g}:${c}@${this.resets}`;
          expect(this.outcomes.get(chunk), `cursor passed ${chunk} silently`).toBeDefined();
        }
      }
    });
    this.inFlight.push(...jobs);
    return jobs;
  }

  completeAll(): void {
    for (const j of this.inFlight) {
      this.lo.complete(j);
      this.completed.push(j);
    }
    this.inFlight = [];
  }

  /** vLLM's reset_cache between two steps. */
  reset(): void {
    this.lo.reset();
    this.resets += 1;
  }

  dropSlidOut(h: RequestHandle, computed: number): void {
    if (!this.slideWindows) return;
    for (const g of this.lo.config.groups) {
      if (g.kind !== 'sliding-window') continue;
      const window = g.windowChunks! * g.tokensPerChunk;
      const skippedTokens = Math.max(0, computed - window + 1);
      const blocks = Math.min(
        Math.floor(skippedTokens / g.tokensPerBlock),
        this.lo.groupProgress(h, g.index).blocks,
      );
      for (let p = 0; p < blocks; p += 1) {
        const old = this.lo.nullBlock(h, g.index, p);
        if (old !== 0) this.freed.push(old);
      }
    }
  }

  /** Ends a request that ended and drained: its slot is free again. */
  release(r: Req): void {
    this.live.delete(r);
    this.lo.release(r.h);
  }
}

/** vLLM's expected_stored shape: "group:position" of every source block of the jobs. */
function blockOffsets(jobs: readonly StoreJob[]): string[] {
  return jobs.flatMap((j) => j.chunks.flatMap((c) => c.positions.map((p) => `${c.group}:${p}`)));
}
const ids = (jobs: readonly StoreJob[]): string[] => jobs.flatMap((j) => chunkIds(j));

// ---------------------------------------------------------------------------

describe('test_offloading_connector', () => {
  // vLLM test_scheduler.py::test_offloading_connector (bpc 3, block 4: 12-token chunks).
  it('stores what the manager keeps, retries a refused chunk, never re-offers an empty answer, touches all keys', async () => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const { lo, tier } = e;
    const a = e.open(1, same(36));
    const aKeys = lo.keys(a.h, 0);

    // 3 chunks; the manager keeps only the middle one.
    tier.answer = (keys) => keys.slice(1, 2);
    const first = a.run([0]);
    expect(tier.offers).toEqual([aKeys.slice(0, 3)]);
    expect(ids(first)).toEqual(['0:1']);
    expect(blockOffsets(first)).toEqual(['0:3', '0:4', '0:5']);
    expect(lo.cursor(a.h, 0)).toBe(3); // chunks 0 and 2 were declined: never offered again

    // A chunk missing one token: nothing offered, nothing touched.
    tier.offers = [];
    tier.touches = [];
    expect(a.run(same(11))).toEqual([]);
    expect(tier.offers).toEqual([]);
    expect(tier.touches).toEqual([]);

    // +1 token: chunk 3 is offered and the manager cannot allocate (None): the cursor stays.
    tier.answer = 'none';
    expect(a.run([0])).toEqual([]);
    expect(tier.offers).toEqual([[lo.keys(a.h, 0)[3]]]);
    expect(lo.cursor(a.h, 0)).toBe(3);
    expect(lo.counters.allocationFailures).toBe(1);

    // Nothing to store (empty keys_to_store): chunk 3 offered again, then chunk 4; the cursor passes both.
    tier.answer = 'empty';
    tier.offers = [];
    expect(a.run(same(13))).toEqual([]);
    expect(tier.offers).toEqual([[lo.keys(a.h, 0)[3]], [lo.keys(a.h, 0)[4]]]);
    expect(lo.cursor(a.h, 0)).toBe(5);

    // One more chunk, all kept: stored, then every key of the request touched (6 of them).
    tier.answer = 'all';
    tier.offers = [];
    tier.touches = [];
    const fifth = a.run(same(13));
    expect(ids(fifth)).toEqual(['0:5']);
    expect(blockOffsets(fifth)).toEqual(['0:15', '0:16', '0:17']);
    expect(tier.offers).toEqual([[lo.keys(a.h, 0)[5]]]);
    expect(tier.touches).toEqual([lo.keys(a.h, 0).slice(0, 6)]);
    const touched1 = tier.touches[0]!;

    // EOS: the finished horizon (75 tokens) completes no new chunk.
    expect(a.run([EOS])).toEqual([]);
    expect(lo.drained(a.h)).toBe(true);
    e.completeAll();
    e.release(a);

    // A request differing only in its last token: the lookup touches 6 keys,
    // the first 5 shared with the first request's.
    const prompt2 = [...same(71), 1];
    tier.touches = [];
    const hit2 = lo.lookup(prompt2);
    expect(hit2.deferred === false && hit2.hitTokens).toBe(0); // chunk 0 was never stored
    expect(tier.touches).toHaveLength(1);
    const touched2 = tier.touches[0]!;
    expect(touched2).toHaveLength(6);
    expect(touched2.slice(0, 5)).toEqual(touched1.slice(0, 5));
    expect(touched2[5]).not.toBe(touched1[5]);
    const b = e.open(2, prompt2);
    tier.offers = [];
    const stored2 = [...b.run([0]), ...b.run([EOS])];
    // vLLM offers all 6 chunks (its mock then "stores" all 18 blocks); kvoff's
    // tier holds chunk 1 already, so 5 are copied.
    expect(tier.offers).toEqual([lo.keys(b.h, 0).slice(0, 6)]);
    expect(ids(stored2)).toEqual(['0:0', '0:2', '0:3', '0:4', '0:5']);
    e.completeAll();
    e.release(b);

    // full_block_tokens - num_computed_tokens < tokens_per_chunk: no lookup at all.
    tier.lookups = 0;
    const short = lo.lookup([...same(4), ...same(8, 1)], { localHitTokens: 4 });
    expect(short.deferred === false && short.hitTokens).toBe(0);
    expect(tier.lookups).toBe(0);

    // A single-chunk prompt that misses: looked up exactly once.
    const miss = lo.lookup(same(12, 1));
    expect(miss.deferred === false && miss.hitTokens).toBe(0);
    expect(tier.lookups).toBe(1);

    // A single-chunk hit loads blocks 0, 1, 2.
    const hit = lo.lookup(same(12));
    if (hit.deferred) throw new Error('unexpected deferral');
    expect(hit.hitTokens).toBe(12);
    const c = e.open(3, same(12), 1 << 20, [...hit.hitChunks]);
    lo.appendBlocks(c.h, 0, e.fresh(3));
    const load = lo.load(c.h, hit);
    expect(load.chunks.flatMap((ch) => ch.positions)).toEqual([0, 1, 2]);
    lo.completeLoad(load);

    // A hit in a middle chunk (the first one is a local GPU hit) loads blocks 3, 4, 5.
    const prompt4 = [...same(24), ...same(12, 1)];
    const mid = lo.lookup(prompt4, { localHitTokens: 12 });
    if (mid.deferred) throw new Error('unexpected deferral');
    expect(mid.hitTokens).toBe(12);
    const d = e.open(4, prompt4, 1 << 20, [...mid.hitChunks]);
    lo.appendBlocks(d.h, 0, e.fresh(6));
    expect(lo.load(d.h, mid).chunks.flatMap((ch) => ch.positions)).toEqual([3, 4, 5]);
  });
});

describe('test_request_preemption', () => {
  // vLLM test_scheduler.py::test_request_preemption, with
  // test_pending_transfer_defers_prefix_lookup and
  // test_async_preempt_readmit_before_transfer_output_is_deferred for the
  // re-admission while the preempted request's stores are in flight.
  for (const asyncScheduling of [false, true]) {
    it(`keeps stores in flight across preemption, defers re-admission, reloads 3 chunks, stores only chunk 3 (async scheduling: ${asyncScheduling})`, async () => {
      const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
      e.asyncScheduling = asyncScheduling;
      const { lo } = e;
      e.completeTransfers = false;
      const a = e.open(1, same(24));
      const jobA = a.run([0]);
      expect(blockOffsets(jobA)).toEqual(['0:0', '0:1', '0:2', '0:3', '0:4', '0:5']);
      const jobB = a.run(same(24 - 4));
      expect(blockOffsets(jobB)).toEqual(['0:6', '0:7', '0:8']);

      // Out of KV space: preempted. Its blocks are freed but the in-flight copies keep them pinned.
      const freed = lo.preempt(a.h);
      for (const j of [...jobA, ...jobB])
        for (const b of j.chunks.flatMap((c) => c.blocks))
          expect(Atomics.load(lo.state.pins, b)).toBe(1);
      expect(freed).toHaveLength(11); // blocks for 44 tokens
      expect(lo.plan()).toEqual([]);

      // Re-admitted before the stores' completions are read: deferred, no lookup, no load.
      const allTokens = [...same(24), ...same(21)];
      e.tier.lookups = 0;
      expect(lo.lookup(allTokens, { handle: a.h })).toEqual({
        deferred: true,
        reason: 'transfers',
      });
      expect(e.tier.lookups).toBe(0);
      e.completeAll();
      expect(blockOffsets(e.completed)).toEqual(blockOffsets([...jobA, ...jobB]));

      // Back from preemption: all 9 blocks load from the tier.
      const again = lo.lookup(allTokens, { handle: a.h });
      if (again.deferred) throw new Error('unexpected deferral');
      expect(again.hitTokens).toBe(36);
      lo.appendBlocks(a.h, 0, e.fresh(9));
      const load = lo.load(a.h, again);
      expect(load.chunks.flatMap((c) => c.positions)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
      lo.completeLoad(load);
      expect(lo.cursor(a.h, 0)).toBe(3);

      // Recompute the rest and decode: chunk 3 (blocks 9, 10, 11) is the only new store.
      e.completeTransfers = true;
      a.computed = 36;
      const after = [...a.run(same(4)), ...a.run([EOS])];
      expect(ids(after)).toEqual(['0:3']);
      expect(blockOffsets(after)).toEqual(['0:9', '0:10', '0:11']);
      e.completeAll();
      // Every store completed: nothing left pinned (vLLM: the fence index is empty).
      for (let b = 1; b < 64; b += 1) expect(Atomics.load(lo.state.pins, b)).toBe(0);
    });
  }
});

describe('test_final_sampled_token_does_not_complete_an_offloaded_block', () => {
  // vLLM test_scheduler.py::test_final_sampled_token_does_not_complete_an_offloaded_block
  // (#54288; it replaced test_last_block_offloaded_at_request_finish, whose
  // offset -1 case stored the block EOS completed). Prompt = 2 blocks + offset.
  for (const offset of [-1, -2]) {
    it(`prompt_offset ${offset}: block 0 stored, block 1 never, request drained`, async () => {
      const e = await Engine.create(config([FULL4]));
      const a = e.open(1, same(8 + offset));
      const jobs = a.run([EOS]);
      expect(ids(jobs)).toEqual(['0:0']);
      // At offset -1 EOS fills block 1: its key exists, its block too, only its last slot was never written.
      expect(e.lo.groupProgress(a.h, 0).keys).toBe(offset === -1 ? 2 : 1);
      expect(e.lo.cursor(a.h, 0)).toBe(1);
      expect(e.lo.drained(a.h)).toBe(true);
    });
  }
});

describe('test_abort_queued_request_does_not_build_store_job', () => {
  // vLLM test_scheduler.py / cancellation module::test_abort_queued_request_does_not_build_store_job
  it('a never-scheduled abort owns keys but no blocks: no job names it, and it drains', async () => {
    const e = await Engine.create(config([FULL4], { gpuBlocks: 64 }));
    const running = e.open(1, same(16));
    running.schedule(16);
    const queued = e.open(2, same(16, 1));
    expect(e.lo.groupProgress(queued.h, 0).keys).toBe(4);
    expect(e.lo.groupProgress(queued.h, 0).blocks).toBe(0);
    e.lo.abort(queued.h);
    e.pass();
    e.completeAll();
    // The one job is the running request's prefill; the aborted one never has one.
    expect(e.completed.map((j) => j.requestId)).toEqual([1]);
    expect(e.lo.counters.jobs).toBe(1);
    expect(e.lo.drained(queued.h)).toBe(true);
    expect(e.lo.release(queued.h)).toEqual([]);
  });
});

describe('test_abort_mid_prefill_stores_only_recorded_computed_blocks', () => {
  // vLLM cancellation module::test_abort_mid_prefill_stores_only_recorded_computed_blocks (#49285)
  it('a stale scheduled count cannot extend an aborted request: one block of four', async () => {
    const e = await Engine.create(config([FULL4]));
    const a = e.open(1, same(16));
    e.lo.appendBlocks(a.h, 0, e.fresh(4));
    e.lo.progress(a.h, 4, 12); // 4 computed, 12 scheduled in a step that never ran
    e.lo.abort(a.h);
    const jobs = e.pass();
    expect(jobs).toHaveLength(1);
    expect(jobs[0]!.chunks.flatMap((c) => c.blocks)).toHaveLength(1);
    expect(ids(jobs)).toEqual(['0:0']);
    expect(e.lo.drained(a.h)).toBe(true);
  });
});

describe('test_store_jobs_wait_for_missing_offload_key', () => {
  // vLLM test_scheduler.py::test_store_jobs_wait_for_missing_offload_key (#52923)
  it('an allocated chunk waits for its hash: cursor 1, then 2 once the key arrives', async () => {
    const e = await Engine.create(config([FULL4], { gpuBlocks: 64 }));
    const { lo, tier } = e;
    const h = lo.open({ requestId: 1, promptTokens: same(8) });
    lo.hash(h, 1); // the second block's hash has not landed
    lo.appendBlocks(h, 0, e.fresh(2));
    tier.answer = 'none';
    lo.progress(h, 0, 8);
    expect(lo.plan()).toEqual([]); // refused: cursor unchanged
    expect(lo.cursor(h, 0)).toBe(0);
    tier.answer = 'all';
    const first = lo.plan();
    expect(ids(first)).toEqual(['0:0']);
    expect(lo.cursor(h, 0)).toBe(1);
    expect(lo.plan()).toEqual([]); // the hash still lags: chunk 1 is not passed
    expect(lo.cursor(h, 0)).toBe(1);
    lo.hash(h);
    expect(ids(lo.plan())).toEqual(['0:1']);
    expect(lo.cursor(h, 0)).toBe(2);
  });
});

describe('test_scheduler_reports_allocation_failure', () => {
  // vLLM test_scheduler.py::test_scheduler_reports_allocation_failure: vLLM
  // counts 2 failures (one while running, one at finish) and then forgets the
  // chunk. kvoff retries a refused final offer FINAL_STORE_ATTEMPTS_MAX times
  // and counts the chunk in chunksDroppedForCapacity (docs/design.md, "The end
  // of a request"): never silent.
  it('a refused chunk is re-offered, never passed; at the end it is counted as dropped', async () => {
    const e = await Engine.create(config([FULL4], { gpuBlocks: 64 }));
    const { lo, tier } = e;
    tier.answer = 'none';
    const a = e.open(1, same(4));
    a.schedule(4);
    expect(lo.counters.allocationFailures).toBe(1);
    expect(lo.cursor(a.h, 0)).toBe(0);
    a.sample(EOS);
    lo.finish(a.h);
    for (let i = 0; i < FINAL_STORE_ATTEMPTS_MAX && !lo.drained(a.h); i += 1) lo.plan();
    expect(lo.drained(a.h)).toBe(true);
    expect(lo.counters.allocationFailures).toBe(1 + FINAL_STORE_ATTEMPTS_MAX);
    expect(tier.offers.every((o) => o.length === 1 && o[0] === lo.keys(a.h, 0)[0])).toBe(true);
    expect(lo.counters.chunksDroppedForCapacity).toBe(1);
    expect(lo.counters.chunksStored).toBe(0);
  });
});

describe('test_on_request_finished_fires_after_final_block_store', () => {
  // vLLM test_scheduler.py::test_on_request_finished_fires_after_final_block_store.
  // kvoff's counterpart of on_request_finished is the drained mark: the
  // allocator may free the blocks only after the final pass offered them.
  it('every offer before the finish is declined; the finishing pass stores block 0, then drains', async () => {
    const e = await Engine.create(config([FULL4], { gpuBlocks: 64 }));
    const { lo, tier } = e;
    tier.answer = 'none';
    const a = e.open(1, same(4));
    a.schedule(4);
    a.sample(EOS);
    expect(lo.drained(a.h)).toBe(false);
    lo.finish(a.h);
    expect(lo.drained(a.h)).toBe(false);
    tier.answer = 'all';
    const final = lo.plan();
    expect(ids(final)).toEqual(['0:0']);
    expect(lo.drained(a.h)).toBe(true);
    expect(tier.offers).toHaveLength(2);
  });
});

describe('test_on_request_finished_not_deferred_until_store_completion', () => {
  // vLLM test_scheduler.py::test_on_request_finished_not_deferred_until_store_completion,
  // with test_request_finished_with_pending_stores_populates_fence and
  // test_multiple_in_flight_stores_all_flushed_by_fence for what keeps the
  // in-flight copies' blocks safe (kvoff: pins instead of fences).
  for (const asyncScheduling of [false, true]) {
    it(`drains while 3 store jobs are in flight; they complete afterwards, their blocks pinned until then (async scheduling: ${asyncScheduling})`, async () => {
      const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
      e.asyncScheduling = asyncScheduling;
      const { lo } = e;
      e.completeTransfers = false;
      const a = e.open(1, same(24));
      a.run([0]);
      a.run(same(24));
      a.run([EOS]);
      expect(e.inFlight).toHaveLength(3);
      expect(lo.drained(a.h)).toBe(true); // the final pass ran; no copy has completed
      const freed = lo.release(a.h);
      const sources = e.inFlight.flatMap((j) => j.chunks.flatMap((c) => c.blocks));
      expect(freed).toEqual(expect.arrayContaining(sources));
      for (const b of sources) expect(Atomics.load(lo.state.pins, b)).toBe(1);
      e.completeAll();
      expect(blockOffsets(e.completed)).toEqual(Array.from({ length: 12 }, (_, i) => `0:${i}`));
      for (const b of sources) expect(Atomics.load(lo.state.pins, b)).toBe(0);
    });
  }
});

describe('test_concurrent_lookups_of_the_same_prefix', () => {
  // vLLM test_scheduler.py::test_concurrent_lookups_of_the_same_prefix
  it('a second lookup of a chunk being loaded is deferred, then hits once the load completed', async () => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const { lo } = e;
    const a = e.open(1, same(12));
    expect(ids(a.run([EOS]))).toEqual(['0:0']);
    e.completeAll();
    const first = lo.lookup(same(12));
    if (first.deferred) throw new Error('unexpected deferral');
    const b = e.open(2, same(12), 1 << 20, [...first.hitChunks]);
    lo.appendBlocks(b.h, 0, e.fresh(3));
    const load = lo.load(b.h, first);
    expect(lo.lookup(same(12))).toEqual({ deferred: true, reason: 'pending' });
    lo.completeLoad(load);
    const second = lo.lookup(same(12));
    expect(second.deferred === false && second.hitTokens).toBe(12);
  });
});

describe('test_abort_loading_requests', () => {
  // vLLM test_scheduler.py::test_abort_loading_requests
  it('an aborted request keeps its blocks until its load completes; nothing is stored for it', async () => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const { lo } = e;
    const a = e.open(1, same(12));
    a.run([EOS]);
    e.completeAll();
    const hit = lo.lookup(same(12));
    if (hit.deferred) throw new Error('unexpected deferral');
    const b = e.open(2, same(12), 1 << 20, [...hit.hitChunks]);
    lo.appendBlocks(b.h, 0, e.fresh(3));
    const load = lo.load(b.h, hit);
    lo.abort(b.h);
    expect(() => lo.release(b.h)).toThrow(IllegalTransitionError); // not deleted while loading
    expect(lo.plan()).toEqual([]);
    lo.completeLoad(load);
    expect(lo.plan()).toEqual([]);
    expect(lo.drained(b.h)).toBe(true);
    expect(lo.release(b.h)).toHaveLength(3);
  });
});

describe('test_two_groups_full_and_sliding_window', () => {
  // vLLM test_scheduler.py::test_two_groups_full_and_sliding_window (T-jul touch counts)
  it('both groups store every chunk while in the window; loads take the window only', async () => {
    const SWA: GroupInput = { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 };
    const e = await Engine.create(config([FULL4, SWA]));
    const { lo, tier } = e;
    expect(lo.config.groups[1]!.windowChunks).toBe(2);
    const prompt = same(12);
    expect(lo.lookup(prompt)).toMatchObject({ deferred: false, hitTokens: 0 });
    const a = e.open(1, prompt);
    const first = a.run([0]);
    expect(ids(first)).toEqual(['0:0', '0:1', '0:2', '1:0', '1:1', '1:2']);
    // 2 touches from the lookup and 2 from the store, 3 keys each.
    expect(tier.touches.map((t) => t.length)).toEqual([3, 3, 3, 3]);

    tier.touches = [];
    const more = a.run(same(12 + 2));
    expect(ids(more)).toEqual(['0:3', '1:3', '0:4', '1:4', '0:5', '1:5']);
    expect(tier.touches).toHaveLength(6); // one per group per store
    // The window slid: the first SW blocks are null now, but they were stored before.
    expect(lo.nullBlock(a.h, 1, 0)).toBe(0);

    // EOS lands in the last slot of block 6: the finishing step declines it.
    expect(a.run([EOS])).toEqual([]);
    e.completeAll();
    e.release(a);

    // 3 full chunks hit: full attention loads 0, 1, 2; the window loads 1, 2.
    tier.touches = [];
    const prompt2 = same(13);
    const hit = lo.lookup(prompt2);
    if (hit.deferred) throw new Error('unexpected deferral');
    expect(hit.hitTokens).toBe(12);
    expect(tier.touches.map((t) => t.length)).toEqual([3, 2]);
    const b = e.open(2, prompt2, 1 << 20, [...hit.hitChunks]);
    lo.appendBlocks(b.h, 0, e.fresh(3));
    lo.appendBlocks(b.h, 1, [0, ...e.fresh(2)]);
    const load = lo.load(b.h, hit);
    expect(load.chunks.map((c) => `${c.group}:${c.chunk}`)).toEqual([
      '0:0',
      '0:1',
      '0:2',
      '1:1',
      '1:2',
    ]);
    lo.completeLoad(load);

    // 3 chunks on the GPU, 1 more loaded: (0, 3) and (1, 3).
    const prompt3 = same(17);
    const next = lo.lookup(prompt3, { localHitTokens: 12 });
    if (next.deferred) throw new Error('unexpected deferral');
    expect(next.hitTokens).toBe(4);
    const c = e.open(3, prompt3, 1 << 20, [...next.hitChunks]);
    lo.appendBlocks(c.h, 0, e.fresh(4));
    lo.appendBlocks(c.h, 1, [0, ...e.fresh(3)]);
    expect(lo.load(c.h, next).chunks.map((ch) => `${ch.group}:${ch.chunk}`)).toEqual([
      '0:3',
      '1:3',
    ]);
  });
});

describe('test_two_groups_different_block_sizes', () => {
  // vLLM test_scheduler.py::test_two_groups_different_block_sizes
  it('groups of 12 and 16 tokens per block each store at their own boundaries, then load 48 and 32 tokens', async () => {
    const e = await Engine.create(
      config([
        { kind: 'full', tokensPerBlock: 12 },
        { kind: 'full', tokensPerBlock: 16 },
      ]),
    );
    const { lo, tier } = e;
    expect(lo.lookup(same(25))).toMatchObject({ hitTokens: 0 });
    expect(tier.touches.map((t) => t.length)).toEqual([2, 1]);
    const a = e.open(1, same(25));
    tier.touches = [];
    expect(ids(a.run([0]))).toEqual(['0:0', '0:1', '1:0']);
    expect(tier.touches.map((t) => t.length)).toEqual([2, 1]);
    // Decode one token per step; at each horizon, the chunks it completes and the store's touch sizes.
    const expected: [number, string[], number[]][] = [
      [31, [], []],
      [32, ['1:1'], [2, 2]],
      [35, [], []],
      [36, ['0:2'], [3, 2]],
      [47, [], []],
      [48, ['0:3', '1:2'], [4, 3]],
      [49, [], []],
    ];
    for (const [horizon, chunks, touches] of expected) {
      tier.touches = [];
      const jobs = a.run(same(horizon - a.computed));
      expect(ids(jobs), `horizon ${horizon}`).toEqual(chunks);
      expect(
        tier.touches.map((t) => t.length),
        `horizon ${horizon}`,
      ).toEqual(touches);
    }
    const rest = a.run([...same(47), EOS]);
    expect(ids(rest).sort()).toEqual(['0:4', '0:5', '0:6', '0:7', '1:3', '1:4', '1:5']);
    e.completeAll();
    e.release(a);

    const hit48 = lo.lookup(same(48));
    if (hit48.deferred) throw new Error('unexpected deferral');
    expect(hit48.hitTokens).toBe(48);
    const b = e.open(2, same(48), 1 << 20, [...hit48.hitChunks]);
    lo.appendBlocks(b.h, 0, e.fresh(4));
    lo.appendBlocks(b.h, 1, e.fresh(3));
    const load = lo.load(b.h, hit48);
    expect(load.chunks.map((c) => `${c.group}:${c.chunk}`)).toEqual([
      '0:0',
      '0:1',
      '0:2',
      '0:3',
      '1:0',
      '1:1',
      '1:2',
    ]);
    lo.completeLoad(load);

    // 48 tokens on the GPU, 32 more loaded: blocks 4, 5, 6 of group 0 and 3, 4 of group 1.
    const hit85 = lo.lookup(same(85), { localHitTokens: 48 });
    if (hit85.deferred) throw new Error('unexpected deferral');
    expect(hit85.hitTokens).toBe(32);
    const c = e.open(3, same(85), 1 << 20, [...hit85.hitChunks]);
    lo.appendBlocks(c.h, 0, e.fresh(7));
    lo.appendBlocks(c.h, 1, e.fresh(5));
    expect(lo.load(c.h, hit85).chunks.map((ch) => `${ch.group}:${ch.chunk}`)).toEqual([
      '0:4',
      '0:5',
      '0:6',
      '1:3',
      '1:4',
    ]);
  });
});

describe('test_max_offload_tokens_validation', () => {
  // vLLM test_scheduler.py::test_max_offload_tokens_validation (3 chunks of 3 blocks).
  const stored = async (cap: number | null | undefined): Promise<string[]> => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const h = e.lo.open({
      requestId: 1,
      promptTokens: same(36),
      ...(cap === undefined ? {} : { maxOffloadTokens: cap }),
    });
    e.lo.hash(h);
    const r = e.track(h, 36);
    return blockOffsets(r.run([EOS]));
  };
  const all = Array.from({ length: 9 }, (_, i) => `0:${i}`);

  it('None (absent or null): every block; 0: none; 24 tokens: the first 2 chunks, even at finish', async () => {
    expect(await stored(undefined)).toEqual(all);
    expect(await stored(null)).toEqual(all);
    expect(await stored(0)).toEqual([]);
    expect(await stored(24)).toEqual(all.slice(0, 6));
    expect(await stored(23)).toEqual(all.slice(0, 3)); // a cap inside a chunk rounds down
  });

  // vLLM warns and ignores a string, float, negative or bool cap. kvoff
  // refuses it with a typed error and opens nothing (bad input changes
  // nothing): a deliberate difference, see the report of this file's commit.
  it('a string, float, negative or bool cap is refused with InvalidArgumentError, nothing opened', async () => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const freeBefore = e.lo.scheduler.freeSlotCount;
    for (const bad of ['24', 24.5, -1, true]) {
      expect(() =>
        e.lo.open({ requestId: 1, promptTokens: same(36), maxOffloadTokens: bad as never }),
      ).toThrow(InvalidArgumentError);
    }
    expect(e.lo.scheduler.freeSlotCount).toBe(freeBefore);
  });
});

describe('test_offload_prompt_only', () => {
  // vLLM test_scheduler.py::test_offload_prompt_only
  for (const asyncScheduling of [false, true]) {
    it(`only the 2 prompt chunks are ever offered, through 4 chunks of decode and the finish (async scheduling: ${asyncScheduling})`, async () => {
      const e = await Engine.create(
        config([FULL4], { blocksPerChunk: 3, offloadPromptOnly: true }),
      );
      e.asyncScheduling = asyncScheduling;
      const a = e.open(1, same(24));
      const jobs = [...a.run(same(12 * 4)), ...a.run([EOS])];
      expect(blockOffsets(jobs)).toEqual(['0:0', '0:1', '0:2', '0:3', '0:4', '0:5']);
      expect(new Set(e.tier.offers.flat()).size).toBe(2);
    });
  }
});

describe('test_stale_sliding_window_block_after_prepare_store_failure', () => {
  // vLLM test_scheduler.py::test_stale_sliding_window_block_after_prepare_store_failure
  it('blocks that slid out while the manager refused are never sources; positions 2 and 3 are stored', async () => {
    const SWA: GroupInput = { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 };
    const e = await Engine.create(config([SWA], { gpuBlocks: 64 }));
    const { lo, tier } = e;
    const a = e.open(1, same(12));
    tier.answer = 'none';
    a.run([0]);
    const before = Array.from(
      lo.state.blocks.subarray(lo.state.blockBase(a.h.slot, 0)).slice(0, 3),
    );
    a.run(same(4)); // block 0 (then 1) slides out and is reused for the new positions
    const base = lo.state.blockBase(a.h.slot, 0);
    const table = lo.state.blocks.subarray(base, base + 4);
    expect([table[0], table[1]]).toEqual([0, 0]);
    expect(table[3]).toBe(before[0]); // the tight pool handed block 0's ID out again
    tier.answer = 'all';
    const jobs = a.run([EOS]);
    expect(blockOffsets(jobs)).toEqual(['0:2', '0:3']);
    // Each source is the block that now holds its position; the reused ID appears once.
    expect(jobs.flatMap((j) => j.chunks.flatMap((c) => c.blocks))).toEqual([table[2], table[3]]);
    expect(lo.cursor(a.h, 0)).toBe(4);
  });
});

describe('test_skip_reading_prefix_cache', () => {
  // vLLM test_scheduler.py::test_skip_reading_prefix_cache
  it('no lookup and no load, but the request still offers its chunks for store', async () => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const { lo, tier } = e;
    const a = e.open(1, same(12));
    expect(ids(a.run([EOS]))).toEqual(['0:0']);
    e.completeAll();
    e.release(a);
    tier.lookups = 0;
    tier.touches = [];
    const skip = lo.lookup(same(12), { skipReadingPrefixCache: true });
    expect(skip).toMatchObject({ deferred: false, hitTokens: 0 });
    expect(tier.lookups).toBe(0);
    expect(tier.touches).toHaveLength(1); // as vLLM, keys are still touched
    const b = e.open(2, same(12));
    tier.offers = [];
    b.run([EOS]);
    // Offered as in vLLM; kvoff's tier already holds it (vLLM's mock re-stores it).
    expect(tier.offers).toEqual([[lo.keys(b.h, 0)[0]]]);
    expect(lo.counters.chunksAlreadyPresent).toBe(1);
  });
});

describe('test_swa_alignment_skip', () => {
  // vLLM test_scheduler.py::test_swa_alignment_skip (T-jul; no extra retained tokens)
  it('stores FA 0, 1 and SW 2, 3, 6, 7 of 8; a later prompt loads FA 0, 1 and SW 6, 7', async () => {
    const e = await Engine.create(
      config([
        { kind: 'full', tokensPerBlock: 16 },
        { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
      ]),
    );
    const { lo } = e;
    e.slideWindows = false; // as the vLLM runner, which decodes too little to free any
    const a = e.open(1, same(32));
    const jobs = [...a.run([0]), ...a.run([EOS])];
    expect(ids(jobs)).toEqual(['0:0', '0:1', '1:2', '1:3', '1:6', '1:7']);
    e.completeAll();
    e.release(a);
    const prompt = [...same(32), 1];
    const hit = lo.lookup(prompt);
    if (hit.deferred) throw new Error('unexpected deferral');
    expect(hit.hitTokens).toBe(32);
    const b = e.open(2, prompt, 1 << 20, [...hit.hitChunks]);
    lo.appendBlocks(b.h, 0, e.fresh(2));
    lo.appendBlocks(b.h, 1, [...same(6), ...e.fresh(2)]);
    expect(lo.load(b.h, hit).chunks.map((c) => `${c.group}:${c.chunk}`)).toEqual([
      '0:0',
      '0:1',
      '1:6',
      '1:7',
    ]);
  });
});

describe('test_request_level_policy_stores_all_blocks', () => {
  // vLLM test_scheduler.py::test_request_level_policy_stores_all_blocks
  for (const cursorPolicy of ['request-level', 'block-level'] as const) {
    it(`${cursorPolicy}: after loading chunk 0, the store offer ${cursorPolicy === 'request-level' ? 'includes' : 'skips'} it`, async () => {
      const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }), { cursorPolicy });
      const { lo, tier } = e;
      const a = e.open(1, same(12));
      a.run([EOS]);
      e.completeAll();
      e.release(a);
      const hit = lo.lookup(same(24));
      if (hit.deferred) throw new Error('unexpected deferral');
      expect(hit.hitTokens).toBe(12);
      const b = e.open(2, same(24), 1 << 20, [...hit.hitChunks]);
      lo.appendBlocks(b.h, 0, e.fresh(3));
      const load = lo.load(b.h, hit);
      expect(load.chunks.flatMap((c) => c.positions)).toEqual([0, 1, 2]);
      lo.completeLoad(load);
      b.computed = 12;
      tier.offers = [];
      const stored = [...b.run([0]), ...b.run([EOS])];
      const keys = lo.keys(b.h, 0);
      expect(tier.offers).toEqual([
        cursorPolicy === 'request-level' ? keys.slice(0, 2) : keys.slice(1, 2),
      ]);
      // vLLM's mock copies all 6 blocks; kvoff's tier holds chunk 0 and copies chunk 1.
      expect(blockOffsets(stored)).toEqual(['0:3', '0:4', '0:5']);
    });
  }
});

describe('test_complete_store_called_per_job', () => {
  // vLLM test_scheduler.py::test_complete_store_called_per_job
  for (const asyncScheduling of [false, true]) {
    it(`each job's completion publishes only that job's keys; the finish adds none (async scheduling: ${asyncScheduling})`, async () => {
      const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
      e.asyncScheduling = asyncScheduling;
      const { lo, tier } = e;
      e.completeTransfers = false;
      const a = e.open(1, same(12));
      const first = a.run([0, 0]);
      expect(ids(first)).toEqual(['0:0']);
      const k = () => lo.keys(a.h, 0);
      expect(tier.state(k()[0]!)).toBe('pending');
      e.completeAll();
      expect(tier.state(k()[0]!)).toBe('hit');
      const second = a.run(same(12 + 1));
      expect(ids(second)).toEqual(['0:1']);
      expect(second[0]!.chunks.map((c) => c.key)).not.toContain(k()[0]);
      expect(tier.state(k()[1]!)).toBe('pending');
      e.completeAll();
      expect(tier.state(k()[1]!)).toBe('hit');
      expect(a.run([EOS])).toEqual([]);
      expect(e.inFlight).toEqual([]);
    });
  }

  // vLLM asserts every transfer succeeds (failures are unsupported); kvoff
  // drops a failed job's reservation and counts its chunks (never readable).
  it('a failed store publishes nothing and is counted; the cursor does not come back for it', async () => {
    const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
    const { lo, tier } = e;
    e.completeTransfers = false;
    const a = e.open(1, same(12));
    const [job] = a.run([0]);
    lo.complete(job!, false);
    e.inFlight = [];
    expect(tier.state(job!.chunks[0]!.key)).toBe('miss');
    expect(lo.counters.chunksTransferFailed).toBe(1);
    expect(lo.cursor(a.h, 0)).toBe(1);
    expect(a.run([EOS])).toEqual([]);
  });
});

describe('TestEagle', () => {
  const EAGLE4: GroupInput = { kind: 'full', tokensPerBlock: 4, eagle: true };

  // vLLM test_scheduler.py::TestEagle::test_full_attn_store_excludes_trailing_decode_block (#52771)
  for (const asyncScheduling of [false, true]) {
    it(`test_full_attn_store_excludes_trailing_decode_block: (1, 3) held back while decoding, stored at finish (async scheduling: ${asyncScheduling})`, async () => {
      const e = await Engine.create(config([FULL4, EAGLE4]));
      e.asyncScheduling = asyncScheduling;
      const a = e.open(1, same(12));
      const decoding = a.run(same(7, 1));
      expect(ids(decoding)).toEqual(['0:0', '0:1', '0:2', '1:0', '1:1', '1:2', '0:3']);
      expect(e.lo.cursor(a.h, 1)).toBe(3);
      expect(ids(a.run([EOS]))).toEqual(['1:3']);
      expect(e.lo.cursor(a.h, 0)).toBe(4); // block 4 ends with the last sampled token: not stored
    });
  }

  // vLLM TestEagle::test_sw_store_excludes_trailing_decode_block
  it('test_sw_store_excludes_trailing_decode_block: an EAGLE window group stores the prompt, then the tail at finish', async () => {
    const e = await Engine.create(
      config([{ kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8, eagle: true }]),
    );
    const a = e.open(1, same(12));
    expect(ids(a.run(same(4, 1)))).toEqual(['0:0', '0:1', '0:2']);
    expect(ids(a.run([EOS]))).toEqual(['0:3']);
  });

  // vLLM TestEagle::test_single_block_stored_at_end_of_prefill
  it('test_single_block_stored_at_end_of_prefill: a one-block prompt is stored at the end of prefill', async () => {
    const e = await Engine.create(config([EAGLE4]));
    const a = e.open(1, same(4));
    a.schedule(4);
    expect(ids(e.completed.concat(e.inFlight))).toEqual(['0:0']);
  });

  // vLLM TestEagle::test_multichunk_store_no_interior_holes (#46971)
  for (const asyncScheduling of [false, true]) {
    it(`test_multichunk_store_no_interior_holes: chunked prefill of 256 blocks, every block stored once, contiguous (async scheduling: ${asyncScheduling})`, async () => {
      const e = await Engine.create(
        config([EAGLE4], { maxBlocksPerRequest: 512, gpuBlocks: 1024, tierChunks: 512 }),
      );
      e.asyncScheduling = asyncScheduling;
      const a = e.open(1, same(256 * 4), 1000);
      const jobs = a.run([1, 1, 1, 1, EOS]);
      e.completeAll();
      const stored = ids(jobs).map((c) => Number(c.split(':')[1]));
      expect(stored).toEqual(Array.from({ length: stored.length }, (_, i) => i));
      // 256 prompt chunks and, once finished, the decoded chunk (horizon 1028).
      expect(stored).toHaveLength(257);
    });
  }

  // vLLM TestEagle::test_full_attn_store_then_load
  it('test_full_attn_store_then_load: the EAGLE group pops its last hit, both groups load 2 chunks', async () => {
    const e = await Engine.create(config([FULL4, EAGLE4]));
    const { lo } = e;
    const a = e.open(1, same(12));
    expect(ids(a.run([EOS]))).toEqual(['0:0', '0:1', '0:2', '1:0', '1:1', '1:2']);
    e.completeAll();
    e.release(a);
    const prompt = [...same(12), 1];
    const hit = lo.lookup(prompt);
    if (hit.deferred) throw new Error('unexpected deferral');
    expect(hit.hitTokens).toBe(8);
    const b = e.open(2, prompt, 1 << 20, [...hit.hitChunks]);
    lo.appendBlocks(b.h, 0, e.fresh(2));
    lo.appendBlocks(b.h, 1, e.fresh(2));
    expect(lo.load(b.h, hit).chunks.map((c) => `${c.group}:${c.chunk}`)).toEqual([
      '0:0',
      '0:1',
      '1:0',
      '1:1',
    ]);
  });
});

describe('LRU touch order (CPUOffloadingManager with the connector)', () => {
  // vLLM's lookup (get_num_new_matched_tokens) touches every key of the
  // prompt in reverse, so the prefix head ends most recent and the LRU
  // evicts a tail first (reference §7.4, §8.3).
  it('after a lookup of a stored prompt, pressure evicts its tail, so its head still hits', async () => {
    const e = await Engine.create(config([FULL4], { tierChunks: 4 }));
    const { lo } = e;
    const a = e.open(1, same(16));
    expect(ids(a.run([EOS]))).toEqual(['0:0', '0:1', '0:2', '0:3']);
    e.completeAll();
    e.release(a);
    // Completion made chunk 3 the most recent; the lookup's touch reverses that.
    expect(lo.lookup(same(16))).toMatchObject({ deferred: false, hitTokens: 16 });
    const b = e.open(2, same(8, 1));
    expect(ids(b.run([EOS]))).toEqual(['0:0', '0:1']);
    expect(lo.tier.stats().evictions).toBe(2);
    expect(lo.lookup(same(16))).toMatchObject({ deferred: false, hitTokens: 8 });
    // The manager's events (vLLM's BlockStored / BlockRemoved): stored at
    // completion, the tail's removal at the eviction; they decide nothing.
    const events = lo.tier.takeEvents();
    expect(events.map((ev) => [ev.kind, ev.keys.length])).toEqual([
      ['stored', 4],
      ['removed', 2],
      ['stored', 2],
    ]);
  });
});

describe('test_chunked_prefill_uses_final_swa_store_horizon', () => {
  // vLLM test_scheduler.py::TestEagle::test_chunked_prefill_uses_final_swa_store_horizon
  // and ::test_active_decode_does_not_advance_swa_final_horizon, newest
  // revision: FA block 36, SW block 4, window 16 (A = 9, W = 4), 1200-token
  // prompt prefilled in chunks of 1000. That revision keeps a running
  // request's partial last segment back and decides it at the final horizon
  // (the "V-latest" variant of the reference). kvoff implements the
  // reference's rule (§5.5.3): the partial segment is judged at each pass's
  // ready boundary, so a chunk reachable then is stored early, and the cursor
  // passes the ones judged unreachable (they stay so). Where the two agree
  // (the aborted request) the test says so; where they do not, it asserts
  // kvoff's rule and names the extra chunks.
  const A = 9;
  const W = 4;
  const HYBRID: ConfigInput = config(
    [
      { kind: 'full', tokensPerBlock: 36 },
      { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 16 },
    ],
    { maxBlocksPerRequest: 512, gpuBlocks: 1024, tierChunks: 512 },
  );
  /** vLLM's expected set: SW chunks [from, to) reachable at a horizon of `h` chunks. */
  const reachable = (h: number, from = 0, to = h): number[] => {
    const out: number[] = [];
    for (let c = from; c < to; c += 1) {
      const segmentStart = c - (c % A);
      if (c % A >= Math.min(A, h - segmentStart) - W) out.push(c);
    }
    return out;
  };
  /**
   * The reference rule over a run: each pass judges [cursor, ready) at its
   * own ready boundary (4-token SW chunks), the cursor then moves to ready.
   */
  const referenceRule = (horizonTokens: readonly number[]): number[] => {
    const out: number[] = [];
    let cursor = 0;
    for (const h of horizonTokens) {
      const ready = Math.floor(h / 4);
      if (ready > cursor) out.push(...reachable(ready, cursor, ready));
      cursor = Math.max(cursor, ready);
    }
    return out;
  };
  const swStored = (jobs: readonly StoreJob[]): number[] =>
    jobs.flatMap((j) => j.chunks.filter((c) => c.group === 1).map((c) => c.chunk));

  it('aborted after the first 1000-token chunk: exactly the final-horizon set (both rules agree)', async () => {
    const e = await Engine.create(HYBRID);
    e.slideWindows = false;
    const a = e.open(1, same(1200), 1000);
    const jobs = a.schedule(1000);
    e.lo.abort(a.h); // horizon: the 1000 computed tokens
    jobs.push(...e.pass());
    expect(e.lo.drained(a.h)).toBe(true);
    expect(swStored(jobs)).toEqual(reachable(250));
  });

  it('completed prompt: the final-horizon set plus chunks 246 and 247, stored early at the 1000-token pass', async () => {
    const e = await Engine.create(HYBRID);
    e.slideWindows = false;
    const a = e.open(1, same(1200), 1000);
    const stored = swStored(a.run([1, 1, EOS]));
    // kvoff (reference rule): passes at horizons 1000, 1200, 1201, then the finish at 1202.
    expect(stored).toEqual(referenceRule([1000, 1200, 1201, 1202]));
    // vLLM's newest expectation, and the two chunks kvoff stores beyond it.
    const finalSet = new Set(reachable(300));
    expect(stored.filter((c) => !finalSet.has(c))).toEqual([246, 247]);
    expect(reachable(300).filter((c) => !stored.includes(c))).toEqual([]);
    expect(new Set(stored).size).toBe(stored.length);
  });

  it('active decode: the first decode chunk (300) is stored while running under the reference rule', async () => {
    const e = await Engine.create(HYBRID);
    e.slideWindows = false;
    const a = e.open(1, same(1200), 1000);
    const stored = swStored(a.run(same(12, 1)));
    // Passes at 1000, 1200, then one decode token each up to 1211. A chunk
    // that becomes ready alone is judged at N = c + 1, where it is always in
    // its segment's tail: every decode chunk is stored (vLLM's newest
    // revision stores none of them while the request runs).
    expect(stored).toEqual(referenceRule([1000, 1200, ...range(1201, 1212)]));
    expect(stored.filter((c) => c >= 297)).toEqual([297, 298, 299, 300, 301]);
  });
});

describe('test_request_preemption, re-admitted with a shorter hit than its cursor', () => {
  // No vLLM test pins this; it follows from update_state_after_alloc in
  // vLLM's scheduler.py, which under BLOCK_LEVEL *assigns* the cursor to the
  // end of the hit (reference §7.3), so a re-admitted request whose stored
  // tail was evicted meanwhile moves its cursor back and stores that tail
  // again after recomputing it. kvoff's cursors only move forward (the one
  // rule, docs/design.md; the fuzzer's cursor-monotonic invariant), so the
  // evicted chunk is not stored again by this request: a later request with
  // the same prefix recomputes and stores it. Asserted here as kvoff's
  // behaviour; see the report of this file's commit.
  it('chunk 2 evicted while preempted: the reload covers 0-1, the cursor stays at 3, chunk 2 is not re-stored', async () => {
    const e = await Engine.create(config([FULL4], { tierChunks: 3 }));
    const { lo, tier } = e;
    const a = e.open(1, same(12));
    expect(ids(a.run([0]))).toEqual(['0:0', '0:1', '0:2']);
    e.completeAll();
    lo.preempt(a.h);
    // Another request's lookup of the same prefix makes chunk 0 the most
    // recent, so pressure from a third prompt evicts chunk 2.
    expect(lo.lookup(same(12))).toMatchObject({ hitTokens: 12 });
    const b = e.open(2, same(4, 1));
    expect(ids(b.run([EOS]))).toEqual(['0:0']);
    e.completeAll();
    const tokensA = same(13);
    const again = lo.lookup(tokensA, { handle: a.h });
    if (again.deferred) throw new Error('unexpected deferral');
    expect(again.hitTokens).toBe(8); // chunk 2 is gone
    lo.appendBlocks(a.h, 0, e.fresh(2));
    lo.completeLoad(lo.load(a.h, again));
    expect(lo.cursor(a.h, 0)).toBe(3); // vLLM: 2
    tier.offers = [];
    a.computed = 8;
    expect(a.run([0, EOS])).toEqual([]); // vLLM offers (and stores) chunk 2 here
    expect(tier.offers).toEqual([]);
    expect(lo.lookup(tokensA)).toMatchObject({ hitTokens: 8 });
  });
});

describe('test_request_finished_mixed_full_attn_and_sliding_window', () => {
  // vLLM test_scheduler.py::test_request_finished_mixed_full_attn_and_sliding_window:
  // a store job of a finished request holds a full-attention and a
  // sliding-window block; vLLM fences both (the SW one at creation, the FA one
  // at request_finished) and flushes the job when a block is reused. kvoff's
  // counterpart is the pin: both source blocks stay pinned, whatever the
  // request's state, until the job completes, and a pool never hands a pinned
  // block out (docs/design.md, "Pins and quarantine").
  it('both source blocks stay pinned after the finish, the slide-out and the release, until the job completes', async () => {
    const SWA: GroupInput = { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 };
    const e = await Engine.create(config([FULL4, SWA], { gpuBlocks: 64 }));
    const { lo } = e;
    e.completeTransfers = false;
    const a = e.open(1, same(4));
    const jobs = a.run([EOS]);
    expect(ids(jobs)).toEqual(['0:0', '1:0']);
    const [fa, sw] = jobs[0]!.chunks.map((c) => c.blocks[0]!);
    expect(lo.drained(a.h)).toBe(true);
    expect(lo.nullBlock(a.h, 1, 0)).toBe(sw); // the window frees it while the copy is in flight
    e.freed.push(sw!);
    lo.release(a.h);
    expect([Atomics.load(lo.state.pins, fa!), Atomics.load(lo.state.pins, sw!)]).toEqual([1, 1]);
    expect(e.fresh(2)).not.toContain(sw); // the engine's pool skips the pinned block
    e.completeAll();
    expect([Atomics.load(lo.state.pins, fa!), Atomics.load(lo.state.pins, sw!)]).toEqual([0, 0]);
    expect(e.fresh(1)).toEqual([sw]); // unpinned: handed out again
  });
});

describe('test_reset_cache', () => {
  // vLLM test_scheduler.py::test_reset_cache: reset_cache flushes in-flight
  // loads, resets the manager, brings every active request's stored index
  // back to 0 and ignores the completions of jobs from before it (the stale
  // job threshold). kvoff's counterparts: the load in flight goes on reading
  // the slots the reset retired and publishes nothing; the tier holds nothing
  // (a lookup misses); the cursor of the request that loaded is 0 and its
  // chunk is stored again; a store job from before the reset publishes nothing.
  for (const asyncScheduling of [false, true]) {
    it(`async scheduling ${asyncScheduling}: the tier is emptied, the load in flight finishes unpublished, cursors go back to 0`, async () => {
      const e = await Engine.create(config([FULL4], { blocksPerChunk: 3, gpuBlocks: 100 }));
      e.asyncScheduling = asyncScheduling;
      const { lo, tier } = e;
      // Store 1 chunk (3 GPU blocks).
      const a = e.open(1, same(12));
      expect(blockOffsets(a.run([EOS]))).toEqual(['0:0', '0:1', '0:2']);
      e.completeAll();
      e.release(a);

      // A request that loads it; the load stays in flight.
      const hit = lo.lookup(same(12));
      if (hit.deferred) throw new Error('unexpected deferral');
      expect(hit.hitTokens).toBe(12);
      const b = e.open(2, same(12), 1 << 20, [...hit.hitChunks]);
      lo.appendBlocks(b.h, 0, e.fresh(3));
      const load = lo.load(b.h, hit);
      const loadedSlot = load.chunks[0]!.tierSlot;
      expect(lo.cursor(b.h, 0)).toBeGreaterThan(0); // the load moved it past the loaded prefix

      e.reset();
      expect(tier.stats()).toMatchObject({ used: 0, writing: 0, reading: 0, retired: 1 });
      expect(lo.cursor(b.h, 0)).toBe(0);
      expect(lo.counters.resets).toBe(1);
      const after = lo.lookup(same(12));
      expect(after.deferred === false && after.hitTokens).toBe(0); // the manager was reset
      // The load's slot is not handed to a new store while the copy may still read it.
      const c = e.open(3, same(12, 5));
      c.run([EOS]);
      expect(e.inFlight.flatMap((j) => j.chunks.map((ch) => ch.tierSlot))).not.toContain(
        loadedSlot,
      );
      e.completeAll();
      e.release(c);

      // The load completes: nothing is published, its slot goes back.
      lo.completeLoad(load);
      expect(tier.stats()).toMatchObject({ retired: 0, reading: 0 });
      expect(tier.state(hit.keys[0]![0]!)).toBe('miss');
      // b's chunk is stored again, from cursor 0.
      const again = b.run([EOS]);
      expect(ids(again)).toEqual(['0:0']);
      e.completeAll();
      expect(tier.state(hit.keys[0]![0]!)).toBe('hit');
      e.release(b);
      expect(lo.counters.chunksDiscardedByReset).toBe(0);
    });
  }
});

describe('test_reset_cache_finalizes_finished_request_with_pending_store', () => {
  // vLLM test_scheduler.py::test_reset_cache_finalizes_finished_request_with_pending_store:
  // a finished request whose store is in flight at reset_cache is finalized
  // (on_request_finished exactly once) and its state dropped; otherwise the
  // deferred hook waits for a job the reset discarded and the entry leaks.
  // kvoff signals a request's end at its final pass (the drained mark, before
  // its copies complete): the reset must neither signal it again nor leave
  // anything behind when the discarded job completes. A running request with
  // a store in flight at the same reset stores its chunks again.
  for (const asyncScheduling of [false, true]) {
    it(`async scheduling ${asyncScheduling}: signalled once, the stale store publishes nothing, nothing leaks`, async () => {
      const e = await Engine.create(config([FULL4], { blocksPerChunk: 3 }));
      e.asyncScheduling = asyncScheduling;
      e.completeTransfers = false;
      const { lo, tier } = e;
      const a = e.open(1, same(24));
      a.run([0]);
      a.run(same(24));
      const running = e.open(2, same(24, 3));
      running.run([0]);
      expect(e.inFlight.some((j) => j.slot === a.h.slot)).toBe(true);
      expect(e.inFlight.some((j) => j.slot === running.h.slot)).toBe(true);
      // The request finishes while its store is in flight: its final pass signals it.
      a.run([EOS]);
      expect(lo.drained(a.h)).toBe(true);
      expect(e.drains.get(`${a.h.slot}:${a.h.generation}`)).toBe(1);
      const inFlight = e.inFlight.reduce((n, j) => n + j.chunks.length, 0);

      e.reset();
      expect(tier.stats()).toMatchObject({ used: 0, retired: inFlight });
      expect(lo.cursor(running.h, 0)).toBe(0);
      expect(lo.cursor(a.h, 0)).toBeGreaterThan(0); // drained: left as it was
      // The discarded jobs complete: nothing published, their pins and slots released.
      const stale = e.inFlight;
      e.completeAll();
      expect(lo.counters.chunksDiscardedByReset).toBe(inFlight);
      expect(tier.stats()).toMatchObject({ used: 0, writing: 0, retired: 0 });
      for (const j of stale) {
        for (const c of j.chunks) {
          for (const b of c.blocks) expect(Atomics.load(lo.state.pins, b)).toBe(0);
          expect(tier.state(c.key)).toBe('miss');
        }
      }
      // Signalled exactly once, through the reset and the completions.
      e.pass();
      expect(e.drains.get(`${a.h.slot}:${a.h.generation}`)).toBe(1);
      e.release(a);
      // The running request stores its two chunks again, once each.
      e.completeTransfers = true;
      const again = running.run([EOS]);
      e.completeAll();
      expect(ids([...again, ...e.completed.filter((j) => !stale.includes(j))])).toContain('0:0');
      expect(tier.stats().used).toBeGreaterThanOrEqual(2);
      expect(e.drains.get(`${running.h.slot}:${running.h.generation}`)).toBe(1);
      e.release(running);
      expect(tier.stats()).toMatchObject({ writing: 0, reading: 0, retired: 0 });
    });
  }
});
