// Benchmark 1: one store-planning pass (StorePlanner.pass) over R active
// requests x G groups. Idle: every request is running and fully stored, so the
// pass finds nothing (the steady state of a server between engine steps).
// With work: before each pass (untimed) every request publishes one more
// chunk in every group, so each pass plans, pins and hands out R jobs of G
// chunks into the real LRU host tier; the jobs are completed after the pass
// (untimed). Figures: ns per request-group (pass time / (R x G)) and heap
// bytes allocated per pass.
//
// Idle passes are timed in batches (many passes per sample: one idle pass over
// 16 requests takes far less than a timer read) by the CPU time the process
// spent on them (process.cpuUsage: this benchmark runs on the main thread
// alone), not the wall time: on a shared machine a 2 ms sample can wait tens of
// ms for a core, which made a 4.5 us pass read as 218 us. The wall figure is
// kept next to it. They alternate, sample by sample, with the plain-read floor: a loop that reads one word of every slot
// of the same layout with a plain (non-atomic) read, the least any pass that
// looks at each slot could cost. The writer side's cost of the dirty bitmap
// (one Atomics.or per publication) is timed the same way next to a plain
// Atomics.store and a whole role publication (SchedulerRole.progress).
import { Bench } from 'tinybench';
import type { ConfigInput, GroupInput } from '../src/config.js';
import { S_COMPUTED_TOKENS, markDirty } from '../src/layout.js';
import type { StoreJob } from '../src/job.js';
import { LocalOffload } from '../src/local.js';
import type { RequestHandle } from '../src/roles/handle.js';
import { HEAP_METHOD, bytesOfOneCall, bytesPerCall, forceGc } from './lib/heap.js';
import type { Figure } from './lib/stats.js';
import { figure } from './lib/stats.js';

const TOKENS_PER_BLOCK = 16;
const BLOCKS_PER_CHUNK = 2;
const TOKENS_PER_CHUNK = TOKENS_PER_BLOCK * BLOCKS_PER_CHUNK;
/** Chunk capacity per request-group; requests are recycled (untimed) when it is reached. */
const CHUNKS_PER_REQUEST = 16;
/** Chunks stored before measuring: the idle state has a non-zero cursor. */
const CHUNKS_AT_START = 2;
const GROUP_KINDS: readonly GroupInput[] = [
  { kind: 'full', tokensPerBlock: TOKENS_PER_BLOCK },
  { kind: 'sliding-window', tokensPerBlock: TOKENS_PER_BLOCK, windowTokens: 1024 },
  { kind: 'full', tokensPerBlock: TOKENS_PER_BLOCK },
  { kind: 'sliding-window', tokensPerBlock: TOKENS_PER_BLOCK, windowTokens: 1024 },
];

export function plannerConfig(requests: number, groups: number): ConfigInput {
  const blocks = requests * groups * CHUNKS_PER_REQUEST * BLOCKS_PER_CHUNK;
  return {
    groups: GROUP_KINDS.slice(0, groups),
    blocksPerChunk: BLOCKS_PER_CHUNK,
    tokensPerHash: TOKENS_PER_BLOCK,
    maxRequests: requests,
    maxBlocksPerRequest: CHUNKS_PER_REQUEST * BLOCKS_PER_CHUNK,
    gpuBlocks: Math.min(blocks + 1, 1 << 22),
    tierChunks: Math.max(4096, 4 * requests * groups),
    bytesPerBlock: 8,
  };
}

/** A population of R running requests driven through the role facade, advanced chunk by chunk. */
export class PlannerFixture {
  readonly lo: LocalOffload;
  readonly requests: number;
  private handles: RequestHandle[] = [];
  private chunks = 0;
  private generation = 0;
  private nextBlock = 1;
  private readonly twoBlocks = new Int32Array(BLOCKS_PER_CHUNK);
  readonly jobs: StoreJob[] = [];
  readonly collect = (job: StoreJob): void => {
    this.jobs.push(job);
  };

  private constructor(lo: LocalOffload, requests: number) {
    this.lo = lo;
    this.requests = requests;
  }

  static async create(requests: number, groups: number): Promise<PlannerFixture> {
    const fx = new PlannerFixture(
      await LocalOffload.create(plannerConfig(requests, groups)),
      requests,
    );
    fx.openAll();
    return fx;
  }

  /** Publishes one more chunk on every request-group (recycling requests at capacity). */
  advance(): void {
    if (this.chunks === CHUNKS_PER_REQUEST) this.recycle();
    const c = this.chunks;
    for (const h of this.handles) this.publishChunk(h, c);
    this.chunks += 1;
  }

  /** Completes the jobs collected by the last pass, as the transfer role would. */
  completeJobs(): void {
    for (const job of this.jobs) this.lo.complete(job);
    this.jobs.length = 0;
  }

  private publishChunk(h: RequestHandle, c: number): void {
    const lo = this.lo;
    lo.progress(h, (c + 1) * TOKENS_PER_CHUNK);
    lo.hash(h, BLOCKS_PER_CHUNK);
    for (let g = 0; g < lo.state.groupCount; g += 1) {
      for (let i = 0; i < BLOCKS_PER_CHUNK; i += 1) {
        this.twoBlocks[i] = this.nextBlock;
        this.nextBlock = this.nextBlock + 1 === lo.config.gpuBlocks ? 1 : this.nextBlock + 1;
      }
      lo.appendBlocks(h, g, this.twoBlocks);
    }
  }

  private openAll(): void {
    const lo = this.lo;
    const prompt = new Int32Array(CHUNKS_PER_REQUEST * TOKENS_PER_CHUNK);
    this.generation += 1;
    this.handles = [];
    for (let r = 0; r < this.requests; r += 1) {
      // Distinct tokens per request and per recycling, so keys never repeat in the tier.
      const salt = (this.generation * this.requests + r) * prompt.length;
      for (let i = 0; i < prompt.length; i += 1) prompt[i] = (salt + i) % 0x7fffffff;
      this.handles.push(lo.open({ requestId: r, promptTokens: prompt }));
    }
    this.chunks = 0;
    for (let k = 0; k < CHUNKS_AT_START; k += 1) this.advance();
    this.lo.planner.pass(this.collect);
    this.completeJobs();
  }

  private recycle(): void {
    for (const h of this.handles) this.lo.finish(h);
    this.lo.planner.pass(this.collect);
    this.completeJobs();
    for (const h of this.handles) this.lo.release(h);
    this.openAll();
  }
}

export interface PlannerOptions {
  readonly requests: readonly number[];
  readonly groups: readonly number[];
  readonly timeMs: number;
  /** Cap on timed passes with work: each needs an untimed publish of R x G chunks before it. */
  readonly workPassesMax: number;
  /** Trials of the heap measurement (each forces full GCs). */
  readonly heapTrials: number;
  /** Largest R measured with work (its untimed publishing dominates the run time). */
  readonly workRequestsMax: number;
  /** Samples of each idle figure (each a batch of passes), alternating with the floor. */
  readonly idleSamples?: number;
}

export interface PlannerRow {
  readonly requests: number;
  readonly groups: number;
  readonly mode: 'idle' | 'work';
  readonly nsPerRequestGroup: Figure;
  readonly passUs: Figure;
  readonly heapBytesPerPass: Figure;
  readonly passes: number;
  /** Idle rows: the same samples by wall-clock time (includes waiting for a core on a shared machine). */
  readonly passWallUs?: Figure;
  /** Idle rows: slots the timed idle passes visited, over all of them (0: they found nothing to do). */
  readonly idleSlotsVisited?: number;
  /**
   * Idle rows: the plain-read floor measured alternately with the pass, ns per
   * request-group (one plain read of one word per slot, divided by R x G).
   */
  readonly floorNsPerRequestGroup?: Figure;
}

export interface WriterCost {
  readonly description: string;
  /** ns per markDirty (one Atomics.or on the bitmap word). */
  readonly markDirtyNs: Figure;
  /** ns per Atomics.store of one word, the cost of publishing any count. */
  readonly atomicStoreNs: Figure;
  /** ns per SchedulerRole.progress (handle check, validation, 3 stores, markDirty). */
  readonly progressNs: Figure;
  /** markDirty as a share of a whole role publication (paired per sample). */
  readonly markDirtyShareOfProgress: Figure;
}

export interface PlannerResults {
  readonly description: string;
  readonly heapMethod: string;
  readonly rows: readonly PlannerRow[];
  readonly writerCost: WriterCost;
}

/** ns per call of `fn`, timed over `calls` calls (one sample). */
function nsPerCall(fn: () => void, calls: number): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i += 1) fn();
  return Number(process.hrtime.bigint() - t0) / calls;
}

/**
 * ns per call of `fn` over `calls` calls (one sample), by the process's CPU
 * time (user + system; only this thread runs) and by the wall clock.
 */
function cpuNsPerCall(fn: () => void, calls: number): { cpuNs: number; wallNs: number } {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i += 1) fn();
  const wallNs = Number(process.hrtime.bigint() - t0) / calls;
  const c = process.cpuUsage(c0);
  return { cpuNs: ((c.user + c.system) * 1000) / calls, wallNs };
}

/** Sum of one plain read of word 0 of every slot: the floor of any per-slot scan. */
function plainReadFloor(control: Int32Array, slots: number, slotWords: number): number {
  let sum = 0;
  for (let s = 0; s < slots; s += 1) sum += control[s * slotWords]!;
  return sum;
}

/**
 * Idle pass and plain-read floor, alternating sample by sample: CPU ns per
 * pass and per floor scan, and wall ns per pass. Each sample runs a batch of
 * them (about 2 ms of work, far above the microsecond resolution of cpuUsage).
 */
function idleSideBySide(
  fx: PlannerFixture,
  samples: number,
): { passNs: number[]; passWallNs: number[]; floorNs: number[]; visited: number } {
  const planner = fx.lo.planner;
  const { control, geometry } = fx.lo.state;
  const slots = fx.requests;
  let sink = 0;
  const floor = () => {
    sink += plainReadFloor(control, slots, geometry.slotWords);
  };
  const pass = () => {
    planner.pass(fx.collect);
  };
  // Size the batch from a first estimate so each sample is about 2 ms.
  const estimate = Math.max(nsPerCall(pass, 8), 1);
  const batch = Math.max(8, Math.min(1 << 20, Math.round(2e6 / estimate)));
  const floorBatch = Math.max(8, Math.min(1 << 22, Math.round(2e6 / Math.max(slots, 1))));
  // Warm both loops up (JIT) before recording.
  nsPerCall(pass, batch);
  nsPerCall(floor, floorBatch);
  const visitedBefore = planner.counters.requestsVisited;
  const passNs: number[] = [];
  const passWallNs: number[] = [];
  const floorNs: number[] = [];
  for (let i = 0; i < samples; i += 1) {
    const p = cpuNsPerCall(pass, batch);
    passNs.push(p.cpuNs);
    passWallNs.push(p.wallNs);
    floorNs.push(cpuNsPerCall(floor, floorBatch).cpuNs);
  }
  if (sink === -1) throw new Error('unreachable');
  return { passNs, passWallNs, floorNs, visited: planner.counters.requestsVisited - visitedBefore };
}

/** The writer side of the dirty bitmap, next to what a publication costs anyway. */
async function writerCost(samples: number): Promise<WriterCost> {
  const lo = await LocalOffload.create(plannerConfig(64, 1));
  const h = lo.open({ requestId: 1, promptTokens: [1, 2, 3, 4] });
  const { dirty, control } = lo.state;
  const word = lo.state.schedulerWord(h.slot, S_COMPUTED_TOKENS);
  let n = 0;
  const mark = () => markDirty(dirty, h.slot);
  const store = () => {
    Atomics.store(control, word, (n += 1) & 1);
  };
  const progress = () => lo.progress(h, 2, (n += 1) & 1);
  const calls = 200_000;
  for (const fn of [mark, store, progress]) nsPerCall(fn, calls);
  const markNs: number[] = [];
  const storeNs: number[] = [];
  const progressNs: number[] = [];
  for (let i = 0; i < samples; i += 1) {
    markNs.push(nsPerCall(mark, calls));
    storeNs.push(nsPerCall(store, calls));
    progressNs.push(nsPerCall(progress, calls));
  }
  return {
    description:
      'One thread, timed loops of 200,000 calls alternating sample by sample: markDirty (the one Atomics.or a publication adds), an Atomics.store of one word, and a whole SchedulerRole.progress (which includes its markDirty). Uncontended: with writers on other cores the bitmap word is shared by up to 32 slots, so its line moves between them.',
    markDirtyNs: figure(markNs, 'ns'),
    atomicStoreNs: figure(storeNs, 'ns'),
    progressNs: figure(progressNs, 'ns'),
    markDirtyShareOfProgress: figure(
      markNs.map((m, i) => m / progressNs[i]!),
      'ratio',
    ),
  };
}

async function timePass(
  name: string,
  fn: () => void,
  hooks: { beforeEach?: () => void; afterEach?: () => void },
  budget: { timeMs: number; iterations: number },
): Promise<number[]> {
  const bench = new Bench({
    time: budget.timeMs,
    warmupTime: Math.max(10, budget.timeMs / 4),
    iterations: budget.iterations,
    warmupIterations: Math.max(1, Math.floor(budget.iterations / 4)),
    retainSamples: true,
    throws: true,
  });
  bench.add(name, fn, hooks);
  const [task] = await bench.run();
  const result = task?.result;
  if (
    result === undefined ||
    result.state !== 'completed' ||
    result.latency.samples === undefined
  ) {
    throw new Error(`planner bench ${name}: no samples`);
  }
  return [...result.latency.samples];
}

export async function runPlannerBench(options: PlannerOptions): Promise<PlannerResults> {
  const rows: PlannerRow[] = [];
  for (const groups of options.groups) {
    for (const requests of options.requests) {
      const fx = await PlannerFixture.create(requests, groups);
      const planner = fx.lo.planner;
      const rg = requests * groups;
      // Few iterations for huge populations: a pass with work over 16k x 4 is tens of ms.
      const iterations = Math.max(4, Math.min(64, Math.floor(2e6 / rg)));
      const idle = idleSideBySide(fx, options.idleSamples ?? 15);
      const idleMs = idle.passNs.map((ns) => ns / 1e6);
      if (fx.jobs.length !== 0) throw new Error('planner bench: an idle pass produced jobs');
      const idleHeap = bytesPerCall(
        () => planner.pass(fx.collect),
        // 20,000 calls at every size: the warm-up must get the closure optimised
        // before the trials (at R x G = 65,536, 76 calls left it to a trial,
        // whose code allocation then read as 8 bytes per pass), and a one-off
        // allocation in a trial (code, feedback: ~19 KB seen at 2,000 calls,
        // 9.5 B per pass) must not read as a per-pass one. Anything allocated
        // on every pass is still >= 16 B per pass. An idle pass takes under
        // 10 us even at R = 16,384, so a trial stays under 0.2 s.
        20_000,
        options.heapTrials,
      );
      rows.push({
        ...row(requests, groups, 'idle', idleMs, figure(idleHeap, 'bytes')),
        passWallUs: figure(
          idle.passWallNs.map((ns) => ns / 1e3),
          'us',
        ),
        idleSlotsVisited: idle.visited,
        floorNsPerRequestGroup: figure(
          idle.floorNs.map((ns) => ns / rg),
          'ns',
        ),
      });

      if (requests > options.workRequestsMax) continue;
      const workMs = await timePass(
        'work',
        () => planner.pass(fx.collect),
        { beforeEach: () => fx.advance(), afterEach: () => fx.completeJobs() },
        {
          timeMs: options.timeMs,
          iterations: Math.min(options.workPassesMax, Math.max(3, Math.floor(iterations / 4))),
        },
      );
      const workHeap: number[] = [];
      for (let t = 0; t < options.heapTrials; t += 1) {
        fx.advance();
        workHeap.push(bytesOfOneCall(() => planner.pass(fx.collect)));
        fx.completeJobs();
      }
      rows.push(row(requests, groups, 'work', workMs, figure(workHeap, 'bytes')));
      forceGc();
    }
  }
  return {
    description:
      'StorePlanner.pass over R running requests x G groups (full and sliding-window, 2 blocks per chunk) with the real LRU host tier. idle: nothing new since the last pass (timed in batches of passes by process CPU time, the only thread running then, alternating sample by sample with the plain-read floor: one plain read of one word per slot of the same layout; passWallUs is the same samples by the wall clock, which on a shared machine includes waiting for a core). work: one new chunk per request-group before every pass (published untimed), jobs completed untimed after it.',
    heapMethod: HEAP_METHOD,
    rows,
    writerCost: await writerCost(options.idleSamples ?? 15),
  };

  function row(
    requests: number,
    groups: number,
    mode: 'idle' | 'work',
    samplesMs: number[],
    heapBytesPerPass: Figure,
  ): PlannerRow {
    const rg = requests * groups;
    return {
      requests,
      groups,
      mode,
      nsPerRequestGroup: figure(
        samplesMs.map((ms) => (ms * 1e6) / rg),
        'ns',
      ),
      passUs: figure(
        samplesMs.map((ms) => ms * 1e3),
        'us',
      ),
      heapBytesPerPass,
      passes: samplesMs.length,
    };
  }
}
