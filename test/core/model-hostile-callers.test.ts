// Model-based test (issue 10): random call sequences, valid and invalid, on
// the single-thread facade and on the external host's views. After every
// refused call the shared state is byte-for-byte unchanged and the error is
// typed; after every accepted call the invariants hold (cursors monotonic,
// nothing stored twice, pins = outstanding jobs, a drained finished request
// has no hole below the ready prefix of the independent specification,
// src/fuzz/spec/); at the end of every sequence nothing leaks. The model
// judges each call both ways: calls it knows to be illegal (a block given
// twice or held by another live request, progress past the known tokens or
// back, a job completed twice, release before the drain) must be refused, and
// calls it knows to be legal must be accepted; only the few it cannot judge
// may go either way. KVOFF_LONG=1 runs 20,000 sequences per target.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { KvoffError } from '../../src/errors.js';
import type { StoreJob } from '../../src/job.js';
import { T_DRAINED_GENERATION } from '../../src/layout.js';
import { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { RequestSnapshot, StoreRole } from '../../src/roles/store.js';
import { specReadyChunks } from '../../src/fuzz/spec/ready-spec.js';
import { createRuntimeBuffers } from '../../src/runtime/buffers.js';
import { ExternalHost } from '../../src/runtime/external.js';
import type { SharedState } from '../../src/state.js';

const LONG = process.env.KVOFF_LONG === '1';
const RUNS = LONG ? 20_000 : 300;
const COMMANDS_MAX = LONG ? 60 : 40;
/** 20,000 sequences take most of an hour on a loaded 2-core box. */
const TIMEOUT_MS = LONG ? 4 * 3_600_000 : 600_000;

const CONFIG = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  blocksPerChunk: 1,
  tokensPerHash: 4,
  maxRequests: 3,
  maxBlocksPerRequest: 8,
  gpuBlocks: 16,
  tierChunks: 512,
  bytesPerBlock: 8,
};
/** Block IDs the commands draw from: 16 and 17 are out of range. */
const BLOCK_ID_LIMIT = 18;

type Status = 'live' | 'finished' | 'aborted' | 'released';

interface Req {
  readonly h: RequestHandle;
  known: number;
  computed: number;
  status: Status;
  settled: boolean;
  /** Non-null block IDs in its table. */
  blocks: number[];
  /** Positions in its table, null ones included. */
  table: number;
}

interface Model {
  reqs: Req[];
  jobs: { job: StoreJob; done: boolean }[];
  /** slot:generation:chunk of every chunk ever dispatched. */
  stored: Set<string>;
  cursors: Map<string, number>;
}

interface Real {
  lo: LocalOffload;
}

/** What the sequences exercised, so a run that tests nothing fails. */
const tally = { accepted: 0, refused: 0, legal: 0, jobs: 0, drainedFinished: 0 };

function stateBytes(state: SharedState): Uint8Array[] {
  const b = state.buffers;
  return [b.control, b.tokens, b.hashes, b.keys, b.blocks, b.pins].map((x) =>
    new Uint8Array(x).slice(),
  );
}

/** What the model knows of a call: it must be accepted, it must be refused, or it cannot tell. */
type Verdict = 'legal' | 'illegal' | 'unknown';

function verdict(illegal: boolean, legal: boolean): Verdict {
  return illegal ? 'illegal' : legal ? 'legal' : 'unknown';
}

/** Runs `call`; refused: typed, nothing changed, and not a call the model knows to be legal; accepted: not one it forbids. */
function attempt(
  state: SharedState,
  extra: () => unknown,
  call: () => void,
  expected: Verdict | boolean,
  what: string,
): boolean {
  const judged: Verdict = expected === true ? 'illegal' : expected === false ? 'unknown' : expected;
  const before = stateBytes(state);
  const extraBefore = JSON.stringify(extra());
  try {
    call();
  } catch (err) {
    if (!(err instanceof KvoffError)) throw err; // an untyped error is a failure
    expect(stateBytes(state), `${what}: refused, but shared state changed`).toEqual(before);
    expect(JSON.stringify(extra()), `${what}: refused, but the tier changed`).toBe(extraBefore);
    if (judged === 'legal')
      throw new Error(`${what}: refused a legal call: ${err.message}`, { cause: err });
    tally.refused += 1;
    return false;
  }
  if (judged === 'illegal') throw new Error(`${what}: accepted a call that must be refused`);
  tally.accepted += 1;
  if (judged === 'legal') tally.legal += 1;
  return true;
}

function pick(m: Model, i: number): Req | undefined {
  return m.reqs.length === 0 ? undefined : m.reqs[i % m.reqs.length];
}

const STALE: RequestHandle = { slot: 0, generation: 99 };

function ownerOf(m: Model, b: number): Req | undefined {
  return m.reqs.find((r) => r.status !== 'released' && r.blocks.includes(b));
}

function drained(lo: LocalOffload, r: Req): boolean {
  return (
    Atomics.load(lo.state.control, lo.state.storeWord(r.h.slot, T_DRAINED_GENERATION)) ===
    r.h.generation
  );
}

/** The invariants after an accepted call. */
function check(m: Model, lo: LocalOffload): void {
  // Pins = source blocks of the jobs issued and not completed.
  const want = new Int32Array(CONFIG.gpuBlocks);
  for (const j of m.jobs) {
    if (j.done) continue;
    for (const c of j.job.chunks) for (const b of c.blocks) want[b]! += 1;
  }
  expect(Array.from(lo.state.pins)).toEqual(Array.from(want));
  for (const r of m.reqs) {
    if (r.status === 'released') continue;
    const p = lo.groupProgress(r.h, 0);
    const key = `${r.h.slot}:${r.h.generation}`;
    // Cursors only move forward.
    expect(p.cursor).toBeGreaterThanOrEqual(m.cursors.get(key) ?? 0);
    m.cursors.set(key, p.cursor);
    // A drained finished request left no hole: every chunk below its final
    // ready prefix (by the specification, not the planner's rule) was stored.
    if (r.status === 'finished' && drained(lo, r)) {
      const snap = new RequestSnapshot(lo.state.groupCount);
      expect(new StoreRole(lo.state).snapshot(r.h.slot, snap)).toBe('ok');
      const g = lo.config.groups[0]!;
      const ready = specReadyChunks(lo.config, snap, g, snap.keyCount[0]!, snap.blockCount[0]!);
      expect(p.cursor).toBeGreaterThanOrEqual(ready);
      tally.drainedFinished += 1;
    }
  }
}

// --- facade commands ---

type Cmd = fc.Command<Model, Real>;

class Open implements Cmd {
  constructor(
    readonly n: number,
    readonly cap: number | undefined,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const free = m.reqs.filter((x) => x.status !== 'released').length < CONFIG.maxRequests;
    let h: RequestHandle | undefined;
    const ok = attempt(
      r.lo.state,
      () => r.lo.tier.stats(),
      () => {
        h = r.lo.open({
          requestId: m.reqs.length,
          promptTokens: tokens(this.n, m.reqs.length),
          ...(this.cap === undefined ? {} : { maxOffloadTokens: this.cap }),
        });
      },
      verdict(this.cap === -1 || !free, true),
      this.toString(),
    );
    if (!ok) return;
    m.reqs.push({
      h: h!,
      known: this.n,
      computed: 0,
      status: 'live',
      settled: false,
      blocks: [],
      table: 0,
    });
    check(m, r.lo);
  }
  toString = () => `open(${this.n}, cap ${this.cap})`;
}

class AppendTokens implements Cmd {
  constructor(
    readonly i: number,
    readonly n: number,
    readonly bad: boolean,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const q = pick(m, this.i);
    const toks = tokens(this.n, 7);
    if (this.bad && toks.length > 0) toks[0] = -1;
    const legal =
      q !== undefined &&
      q.status === 'live' &&
      !(this.bad && toks.length > 0) &&
      q.known + this.n <= resolveConfig(CONFIG).maxTokensPerRequest;
    const ok = attempt(
      r.lo.state,
      () => r.lo.tier.stats(),
      () => r.lo.appendTokens(q?.h ?? STALE, toks),
      verdict(!legal, legal),
      this.toString(),
    );
    if (!ok) return;
    q!.known += this.n;
    check(m, r.lo);
  }
  toString = () => `appendTokens(${this.i}, ${this.n}, bad ${this.bad})`;
}

class Progress implements Cmd {
  constructor(
    readonly i: number,
    readonly computedDelta: number,
    readonly scheduled: number,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const q = pick(m, this.i);
    const computed = (q?.computed ?? 0) + this.computedDelta;
    const legal =
      q !== undefined && q.status === 'live' && this.computedDelta >= 0 && computed <= q.known;
    const ok = attempt(
      r.lo.state,
      () => r.lo.tier.stats(),
      () => r.lo.progress(q?.h ?? STALE, computed, this.scheduled),
      verdict(!legal, legal),
      this.toString(),
    );
    if (!ok) return;
    q!.computed = computed;
    check(m, r.lo);
  }
  toString = () => `progress(${this.i}, +${this.computedDelta}, ${this.scheduled})`;
}

class AppendBlocks implements Cmd {
  constructor(
    readonly i: number,
    readonly ids: number[],
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const q = pick(m, this.i);
    const nonNull = this.ids.filter((b) => b !== 0);
    const dup = new Set(nonNull).size !== nonNull.length;
    const owners = nonNull.map((b) => ownerOf(m, b));
    const heldByLive = owners.some((o) => o !== undefined && o.status === 'live');
    const heldByEnded = owners.some((o) => o !== undefined && o.status !== 'live');
    const outOfRange = nonNull.some((b) => b >= CONFIG.gpuBlocks);
    const open = q !== undefined && q.status !== 'released';
    const full = open && q.table + this.ids.length > CONFIG.maxBlocksPerRequest;
    const illegal = !open || dup || heldByLive || outOfRange || full || q.settled;
    // A block an ended request still holds: the model cannot tell whether the table counts it.
    const ok = attempt(
      r.lo.state,
      () => r.lo.tier.stats(),
      () => r.lo.appendBlocks(q?.h ?? STALE, 0, this.ids),
      verdict(illegal, !heldByEnded),
      this.toString(),
    );
    if (!ok) return;
    q!.blocks.push(...nonNull);
    q!.table += this.ids.length;
    check(m, r.lo);
  }
  toString = () => `appendBlocks(${this.i}, [${this.ids.join(', ')}])`;
}

class Lifecycle implements Cmd {
  constructor(
    readonly i: number,
    readonly event: 'finish' | 'abort' | 'preempt' | 'settle' | 'hash' | 'release',
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const q = pick(m, this.i);
    const h = q?.h ?? STALE;
    const lo = r.lo;
    const live = q !== undefined && q.status === 'live';
    const ended = q !== undefined && (q.status === 'finished' || q.status === 'aborted');
    let judged: Verdict;
    let call: () => void;
    switch (this.event) {
      case 'finish':
        call = () => lo.finish(h);
        judged = verdict(!live, live);
        break;
      case 'abort':
        call = () => lo.abort(h);
        judged = verdict(!live, live);
        break;
      case 'preempt':
        call = () => {
          lo.preempt(h);
        };
        judged = verdict(!live, live);
        break;
      case 'settle':
        call = () => lo.settle(h);
        // Settling twice: the model cannot tell whether it is refused or a no-op.
        judged = verdict(!ended, ended && !q.settled);
        break;
      case 'hash':
        call = () => {
          lo.hash(h);
        };
        judged = verdict(q === undefined || q.status === 'released', true);
        break;
      case 'release': {
        call = () => {
          lo.release(h);
        };
        const ready = ended && drained(lo, q);
        judged = verdict(!ready, ready);
        break;
      }
    }
    const ok = attempt(lo.state, () => lo.tier.stats(), call, judged, this.toString());
    if (!ok) return;
    if (this.event === 'finish') q!.status = 'finished';
    else if (this.event === 'abort') q!.status = 'aborted';
    else if (this.event === 'preempt') {
      q!.computed = 0;
      q!.blocks = [];
      q!.table = 0;
    } else if (this.event === 'settle') q!.settled = true;
    else if (this.event === 'release') {
      q!.status = 'released';
      q!.blocks = [];
      q!.table = 0;
    }
    check(m, lo);
  }
  toString = () => `${this.event}(${this.i})`;
}

/** The legal happy path in one step: hash, fresh blocks for every known token, progress to them. */
class Feed implements Cmd {
  constructor(readonly i: number) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const q = pick(m, this.i);
    if (q === undefined || q.status !== 'live') return;
    const lo = r.lo;
    const stats = () => lo.tier.stats();
    attempt(lo.state, stats, () => lo.hash(q.h), 'legal', 'feed: hash');
    const want = Math.min(Math.ceil(q.known / 4), CONFIG.maxBlocksPerRequest) - q.blocks.length;
    const fresh: number[] = [];
    for (let b = 1; b < CONFIG.gpuBlocks && fresh.length < want; b += 1) {
      if (ownerOf(m, b) === undefined) fresh.push(b);
    }
    const blocksOk = !q.settled && q.table + fresh.length <= CONFIG.maxBlocksPerRequest;
    if (
      attempt(
        lo.state,
        stats,
        () => lo.appendBlocks(q.h, 0, fresh),
        verdict(!blocksOk, blocksOk),
        'feed: blocks',
      )
    ) {
      q.blocks.push(...fresh);
      q.table += fresh.length;
    }
    if (
      attempt(
        lo.state,
        stats,
        () => lo.progress(q.h, q.known),
        verdict(false, q.known >= q.computed),
        'feed: progress',
      )
    ) {
      q.computed = q.known;
    }
    check(m, lo);
  }
  toString = () => `feed(${this.i})`;
}

class Plan implements Cmd {
  check = () => true;
  run(m: Model, r: Real): void {
    const jobs = r.lo.plan();
    for (const job of jobs) {
      for (const c of job.chunks) {
        const key = `${job.slot}:${job.generation}:${c.group}:${c.chunk}`;
        expect(m.stored.has(key), `chunk ${key} stored twice`).toBe(false);
        m.stored.add(key);
      }
      m.jobs.push({ job, done: false });
      tally.jobs += 1;
    }
    check(m, r.lo);
  }
  toString = () => 'plan()';
}

class Complete implements Cmd {
  constructor(
    readonly i: number,
    readonly success: boolean,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const j = m.jobs.length === 0 ? undefined : m.jobs[this.i % m.jobs.length];
    const job =
      j?.job ?? ({ jobId: 1, slot: 0, generation: 1, requestId: 0, chunks: [] } as StoreJob);
    const ok = attempt(
      r.lo.state,
      () => r.lo.tier.stats(),
      () => r.lo.complete(job, this.success),
      verdict(j === undefined || j.done, true),
      this.toString(),
    );
    if (!ok) return;
    j!.done = true;
    check(m, r.lo);
  }
  toString = () => `complete(${this.i}, ${this.success})`;
}

function tokens(n: number, salt: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 31 + salt * 977) % 5000);
}

const ids = fc.array(fc.integer({ min: 0, max: BLOCK_ID_LIMIT - 1 }), { maxLength: 4 });
const facadeCommands = [
  fc
    .tuple(
      fc.integer({ min: 0, max: 24 }),
      fc.option(fc.integer({ min: -1, max: 20 }), { nil: undefined }),
    )
    .map(([n, cap]) => new Open(n, cap)),
  fc
    .tuple(fc.nat(), fc.integer({ min: 0, max: 8 }), fc.boolean())
    .map(([i, n, b]) => new AppendTokens(i, n, b)),
  fc
    .tuple(fc.nat(), fc.integer({ min: -2, max: 12 }), fc.integer({ min: 0, max: 6 }))
    .map(([i, d, s]) => new Progress(i, d, s)),
  fc.tuple(fc.nat(), ids).map(([i, b]) => new AppendBlocks(i, b)),
  fc
    .tuple(
      fc.nat(),
      fc.constantFrom('finish', 'abort', 'preempt', 'settle', 'hash', 'release' as const),
    )
    .map(([i, e]) => new Lifecycle(i, e)),
  fc.constant(null).map(() => new Plan()),
  fc.constant(null).map(() => new Plan()),
  fc.nat().map((i) => new Feed(i)),
  fc.nat().map((i) => new Feed(i)),
  fc.tuple(fc.nat(), fc.boolean()).map(([i, s]) => new Complete(i, s)),
];

/** Ends everything the sequence left and checks that nothing leaks. */
function drainAll(m: Model, lo: LocalOffload): void {
  for (const j of m.jobs) {
    if (!j.done) {
      lo.complete(j.job);
      j.done = true;
    }
  }
  for (const q of m.reqs) {
    if (q.status === 'released') continue;
    if (q.status === 'live') lo.abort(q.h);
    lo.settle(q.h);
    lo.hash(q.h);
    for (let pass = 0; pass < 4 && !drained(lo, q); pass += 1) {
      for (const job of lo.plan()) lo.complete(job);
    }
    expect(drained(lo, q)).toBe(true);
    lo.release(q.h);
    q.status = 'released';
  }
  expect(Array.from(lo.state.pins).every((p) => p === 0)).toBe(true);
  for (let s = 0; s < CONFIG.maxRequests; s += 1) {
    expect(Atomics.load(lo.state.control, lo.state.schedulerWord(s, 0)) % 2).toBe(0);
  }
  expect(lo.tier.stats().writing).toBe(0);
  expect(lo.tier.stats().reading).toBe(0);
}

describe('model: hostile call sequences', () => {
  it(
    `facade: ${RUNS} sequences; refused calls change nothing, accepted ones keep the invariants, nothing leaks`,
    async () => {
      const base = await LocalOffload.create(CONFIG); // loads the hashing module once
      expect(base.config.gpuBlocks).toBe(CONFIG.gpuBlocks);
      await fc.assert(
        fc.asyncProperty(
          fc.commands(facadeCommands, { maxCommands: COMMANDS_MAX, size: 'max' }),
          async (cmds) => {
            const lo = await LocalOffload.create(CONFIG);
            const m: Model = { reqs: [], jobs: [], stored: new Set(), cursors: new Map() };
            fc.modelRun(() => ({ model: m, real: { lo } }), cmds);
            drainAll(m, lo);
          },
        ),
        { numRuns: RUNS },
      );
      expect(tally.refused).toBeGreaterThan(RUNS);
      expect(tally.accepted).toBeGreaterThan(RUNS);
      // Most accepted calls were judged legal in advance, so a refusal of one would have failed.
      expect(tally.legal).toBeGreaterThan(tally.accepted / 2);
      expect(tally.jobs).toBeGreaterThan(RUNS / 10);
      expect(tally.drainedFinished).toBeGreaterThan(0);
    },
    TIMEOUT_MS,
  );

  it(
    `external host views: ${RUNS} sequences of pool, allocator and scheduler calls`,
    async () => {
      const config = resolveConfig(CONFIG);
      await fc.assert(
        fc.property(
          fc.array(
            fc.oneof(
              fc.record({ op: fc.constant('open' as const), n: fc.integer({ min: 0, max: 16 }) }),
              fc.record({
                op: fc.constant('allocate' as const),
                n: fc.integer({ min: 0, max: 6 }),
              }),
              fc.record({ op: fc.constant('append' as const), i: fc.nat(), ids }),
              fc.record({
                op: fc.constant('appendPool' as const),
                i: fc.nat(),
                k: fc.nat(),
                n: fc.integer({ min: 1, max: 3 }),
              }),
              fc.record({
                op: fc.constant('progress' as const),
                i: fc.nat(),
                c: fc.integer({ min: 0, max: 24 }),
              }),
              fc.record({ op: fc.constant('end' as const), i: fc.nat() }),
              fc.record({ op: fc.constant('clear' as const), i: fc.nat() }),
              fc.record({ op: fc.constant('release' as const), i: fc.nat() }),
            ),
            { maxLength: COMMANDS_MAX },
          ),
          (ops) => {
            // No hasher or store threads: the host's own calls are the only writers.
            const host = new ExternalHost(config, createRuntimeBuffers(config));
            const state = host.roles.state;
            const handed: number[] = [];
            const reqs: { h: RequestHandle; known: number; blocks: number[]; live: boolean }[] = [];
            const pool = () => ({ inUse: host.pool.inUse, handed });
            for (const op of ops) {
              const q = 'i' in op && reqs.length > 0 ? reqs[op.i % reqs.length] : undefined;
              const h = q?.h ?? STALE;
              const heldBy = (b: number) => reqs.some((x) => x.blocks.includes(b));
              switch (op.op) {
                case 'open': {
                  let got: RequestHandle | undefined;
                  if (
                    attempt(
                      state,
                      pool,
                      () =>
                        (got = host.scheduler.open({
                          requestId: 1,
                          promptTokens: tokens(op.n, 3),
                        })),
                      // Nothing is ever released here: a slot is free while fewer than maxRequests were opened.
                      verdict(reqs.length >= CONFIG.maxRequests, true),
                      'open',
                    )
                  )
                    reqs.push({ h: got!, known: op.n, blocks: [], live: true });
                  break;
                }
                case 'allocate': {
                  const got = host.pool.allocate(op.n);
                  if (got) handed.push(...got);
                  break;
                }
                case 'append': {
                  const nonNull = op.ids.filter((b) => b !== 0);
                  const bad =
                    new Set(nonNull).size !== nonNull.length ||
                    nonNull.some((b) => heldBy(b) || !handed.includes(b));
                  if (
                    attempt(
                      state,
                      pool,
                      () => host.allocator.appendBlocks(h, 0, op.ids),
                      q !== undefined && bad,
                      'append',
                    )
                  )
                    q!.blocks.push(...nonNull);
                  break;
                }
                case 'appendPool': {
                  const free = handed.filter((b) => !heldBy(b));
                  const pickIds = free.slice(op.k % Math.max(1, free.length)).slice(0, op.n);
                  if (
                    attempt(
                      state,
                      pool,
                      () => host.allocator.appendBlocks(h, 0, pickIds),
                      false,
                      'appendPool',
                    )
                  )
                    q!.blocks.push(...pickIds);
                  break;
                }
                case 'progress':
                  attempt(
                    state,
                    pool,
                    () => host.scheduler.progress(h, op.c),
                    q !== undefined && q.live && op.c > q.known,
                    'progress',
                  );
                  break;
                case 'end':
                  if (
                    attempt(
                      state,
                      pool,
                      () => host.scheduler.abort(h),
                      verdict(q === undefined || !q.live, true),
                      'end',
                    )
                  )
                    q!.live = false;
                  break;
                case 'clear': {
                  let freed: number[] = [];
                  if (
                    attempt(state, pool, () => (freed = host.allocator.clear(h)), false, 'clear')
                  ) {
                    expect(freed.sort((a, b) => a - b)).toEqual(
                      [...q!.blocks].sort((a, b) => a - b),
                    );
                    q!.blocks = [];
                    host.pool.release(freed);
                    for (const b of freed) handed.splice(handed.indexOf(b), 1);
                  }
                  break;
                }
                case 'release':
                  // Nothing drains without a store: release is always refused here.
                  attempt(state, pool, () => host.release(h), q !== undefined, 'release');
                  break;
              }
              // The pool and the tables agree: no block in two tables, every table block handed out.
              const all = reqs.flatMap((x) => x.blocks);
              expect(new Set(all).size).toBe(all.length);
              for (const b of all) expect(host.pool.isAllocated(b)).toBe(true);
              expect(host.pool.inUse).toBe(handed.length);
            }
          },
        ),
        { numRuns: RUNS },
      );
    },
    TIMEOUT_MS,
  );
});
