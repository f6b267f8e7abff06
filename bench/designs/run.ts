// Benchmark 3: the four designs on the same event stream, side by side in
// every repeat (their order rotates between repeats so drift on a shared
// machine does not favour one), with ratios paired per repeat.
import { MessageChannel } from 'node:worker_threads';
import type { Figure } from '../lib/stats.js';
import { figure, median, ratioFigure } from '../lib/stats.js';
import type { ThreadPool, ThreadTask } from '../lib/threads.js';
import { runSingleThreadDesign, setupKvoffDesign } from './kvoff.js';
import { newLockBuffer } from './kvoff-locked.js';
import { setupMutexDesign } from './lean-mutex.js';
import { eventCount, newBellBuffer, roundMsFor, writerSources } from './stream.js';
import type { StoreOutcome, StreamShape } from './stream.js';

const DESIGNS = {
  a: 'kvoff shared-memory roles: lock-free, one writer per word, the store visits the slots whose dirty bit is set and parks on a doorbell',
  b: 'message passing done well: each writer sends transferred Float64Array batches (64 deltas, and at the end of each round) and rings a doorbell; the store drains its ports with receiveMessageOnPort, applies the deltas with the same role code to state it owns, then runs one planner pass',
  c: "one Atomics mutex around all state, taken once per batch (a writer's round of publications, the store's pass): the same role and planner code, without the seqlock re-check the lock makes moot",
  d: 'everything on one thread: the same role and planner code, a pass after every round of publications',
  bLean:
    'message passing written by hand with the least work: a postMessage per delta, plain arrays and storeWindow, no role classes, planner, tier or pins',
  bLeanBatched:
    'as bLean, batched as in b: transferred Float64Array batches, receiveMessageOnPort, one window per touched request per drain',
  cLean:
    'one mutex per batch written by hand with the least work: plain shared arrays and storeWindow, no role classes, planner, tier or pins',
} as const;
type DesignName = keyof typeof DESIGNS;

const DESIGN_LIMITS: Readonly<Record<DesignName, string>> = {
  a: 'Per event: the role method (handle check, validation, 3-6 atomic accesses, one Atomics.or on the dirty bitmap) on the writer; on the store a pass that reads one bitmap word per 32 slots and snapshots only the slots that changed (12 + 3G Atomics.load each, a builtin call on Node 20). With 3 writers and the store there are 4 busy threads on 2 cores.',
  b: 'Per batch: a transfer (no payload clone) and a doorbell ring; per delta the same role code on the store thread, so the store does all role work serially while the writers only pack numbers.',
  c: 'Writers and the store serialise on one lock word per batch; a thread that misses the lock spins briefly, then sleeps in Atomics.wait (a syscall).',
  d: 'No concurrency and no cross-core traffic: one core does all the work, bounding what the work itself costs; it cannot overlap with an engine and leaves the second core idle.',
  bLean:
    'The message cost alone (a structured clone and an event-loop task per delta) with almost no work per delta.',
  bLeanBatched:
    'The batched message mechanism with almost no work per delta: what message passing costs when done well.',
  cLean: 'The lock alone, once per batch, with almost no work per event.',
};
export interface DesignOptions {
  readonly shape: StreamShape;
  readonly writerCounts: readonly number[];
  readonly repeats: number;
  readonly batch: number;
  /** Offered load for the latency runs, as a fraction of the slowest design's capacity. */
  readonly loadFraction?: number;
  /**
   * Chunks per request in the paced latency runs (default shape.chunks). A
   * paced run lasts events / offered rate, twice the slowest design's run, so
   * these dominated the quick mode's time; a shorter stream still gives
   * requests x loadChunks latency samples per run.
   */
  readonly loadChunks?: number;
  /** Chunks per request in the one unrecorded warm-up run of each design (default shape.chunks). */
  readonly warmupChunks?: number;
}

interface DesignRow {
  readonly design: DesignName;
  readonly writers: number;
  readonly eventsPerSecond: Figure;
  /** Events per CPU-second of the whole process (process.cpuUsage: every thread, user + system). */
  readonly eventsPerCpuSecond: Figure;
  readonly latencyMsP50: Figure;
  readonly latencyMsP99: Figure;
  /** a's events/s divided by this design's, paired per repeat (> 1: a is faster). */
  readonly aSpeedup: Figure;
  /** a's events per CPU-second divided by this design's, paired per repeat (> 1: a is cheaper). */
  readonly aCpuAdvantage: Figure;
  readonly latencyP50OverA: Figure;
  readonly latencyP99OverA: Figure;
  /** At the fixed offered load: p99 publication -> dispatch (absent for d, which is not threaded). */
  readonly loadLatencyMsP99?: Figure;
  /** At the fixed offered load: this design's p99 over a's, paired per repeat (> 1: a is lower). */
  readonly loadLatencyP99OverA?: Figure;
  /** Medians of the store's own counters (passes, jobs, messages, snapshot retries). */
  readonly store: Record<string, number>;
}

interface DesignLoad {
  readonly writers: number;
  /** The slowest threaded design by median events/s, and that median. */
  readonly slowestDesign: DesignName;
  readonly slowestEventsPerSecond: number;
  readonly offeredEventsPerSecond: number;
}

export interface DesignResults {
  readonly description: string;
  readonly requests: number;
  readonly chunksPerRequest: number;
  readonly eventsPerRun: number;
  readonly batch: number;
  readonly designs: typeof DESIGNS;
  readonly limits: typeof DESIGN_LIMITS;
  readonly loads: readonly DesignLoad[];
  readonly rows: readonly DesignRow[];
  /** Chunks per request of the paced latency runs. */
  readonly loadChunks?: number;
}

const ORDER: readonly DesignName[] = ['a', 'b', 'c', 'd', 'bLean', 'bLeanBatched', 'cLean'];
const THREADED: readonly DesignName[] = ORDER.filter((d) => d !== 'd');

interface Measured {
  readonly out: StoreOutcome;
  readonly cpuMs: number;
}

async function runOnce(
  pool: ThreadPool,
  design: DesignName,
  shape: StreamShape,
  writers: number,
  batch: number,
  roundMs?: number,
): Promise<Measured> {
  const cpu0 = process.cpuUsage();
  const out = await runDesign(pool, design, shape, writers, batch, roundMs);
  const cpu = process.cpuUsage(cpu0);
  return { out, cpuMs: (cpu.user + cpu.system) / 1000 };
}

async function runDesign(
  pool: ThreadPool,
  design: DesignName,
  shape: StreamShape,
  writers: number,
  batch: number,
  roundMs?: number,
): Promise<StoreOutcome> {
  const split = writerSources(writers);
  const pace = roundMs === undefined ? {} : { roundMs };
  let tasks: ThreadTask[];
  if (design === 'd') return runSingleThreadDesign(shape);
  if (design === 'a' || design === 'c') {
    const setup = { ...setupKvoffDesign(shape), lock: newLockBuffer(), shape };
    const kind = design === 'a' ? 'design-a' : 'design-c';
    tasks = [
      { kind: `${kind}-store`, params: setup },
      ...split.map((sources) => ({
        kind: `${kind}-writer`,
        params: { ...setup, sources, ...pace },
      })),
    ];
  } else if (design === 'cLean') {
    const setup = setupMutexDesign(shape);
    tasks = [
      { kind: 'lean-mutex-store', params: setup },
      ...split.map((sources) => ({
        kind: 'lean-mutex-writer',
        params: { ...setup, sources, ...pace },
      })),
    ];
  } else {
    const channels = split.map(() => new MessageChannel());
    const ports = channels.map((ch) => ch.port1);
    const bell = newBellBuffer();
    const storeKind =
      design === 'bLean'
        ? 'lean-message-store'
        : design === 'bLeanBatched'
          ? 'lean-batched-message-store'
          : 'design-b-store';
    tasks = [
      { kind: storeKind, params: { shape, ports, bell }, transfer: ports },
      ...split.map((sources, i) => {
        const port = channels[i]!.port2;
        return {
          kind: 'message-writer',
          params: {
            shape,
            sources,
            port,
            batch: design === 'bLean' ? 1 : batch,
            ...(design === 'bLean' ? {} : { bell }),
            ...pace,
          },
          transfer: [port],
        };
      }),
    ];
  }
  const [store] = (await pool.run(tasks)) as [StoreOutcome, ...number[]];
  const expected = shape.requests * shape.chunks;
  if (store.dispatchedChunks !== expected) {
    throw new Error(`design ${design}: dispatched ${store.dispatchedChunks} of ${expected} chunks`);
  }
  return store;
}

export async function runDesignBench(
  pool: ThreadPool,
  options: DesignOptions,
): Promise<DesignResults> {
  const { shape } = options;
  const events = eventCount(shape);
  const rows: DesignRow[] = [];
  const loads: DesignLoad[] = [];
  const fraction = options.loadFraction ?? 0.5;
  for (const writers of options.writerCounts) {
    // One unrecorded run of each design first: JIT warm-up in every thread.
    const warmup = { ...shape, chunks: options.warmupChunks ?? shape.chunks };
    for (const d of ORDER) await runOnce(pool, d, warmup, writers, options.batch);
    const eps = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const epc = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const p50 = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const p99 = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const notes = new Map<DesignName, Record<string, number>[]>(ORDER.map((d) => [d, []]));
    for (let rep = 0; rep < options.repeats; rep += 1) {
      for (let k = 0; k < ORDER.length; k += 1) {
        const d = ORDER[(k + rep) % ORDER.length]!;
        const { out, cpuMs } = await runOnce(pool, d, shape, writers, options.batch);
        eps.get(d)!.push(events / (out.elapsedMs / 1000));
        epc.get(d)!.push(events / (cpuMs / 1000));
        p50.get(d)!.push(out.latencyMsP50);
        p99.get(d)!.push(out.latencyMsP99);
        notes.get(d)!.push(out.notes ?? {});
      }
    }
    // Latency at a fixed offered load: a fraction of the slowest threaded design's capacity.
    const slowest = THREADED.reduce((x, y) => (median(eps.get(y)!) < median(eps.get(x)!) ? y : x));
    const slowestEps = median(eps.get(slowest)!);
    const offered = fraction * slowestEps;
    loads.push({
      writers,
      slowestDesign: slowest,
      slowestEventsPerSecond: slowestEps,
      offeredEventsPerSecond: offered,
    });
    const loadShape = { ...shape, chunks: options.loadChunks ?? shape.chunks };
    const roundMs = roundMsFor(loadShape, offered);
    const loadP99 = new Map<DesignName, number[]>(THREADED.map((d) => [d, []]));
    for (let rep = 0; rep < options.repeats; rep += 1) {
      for (let k = 0; k < THREADED.length; k += 1) {
        const d = THREADED[(k + rep) % THREADED.length]!;
        const { out } = await runOnce(pool, d, loadShape, writers, options.batch, roundMs);
        loadP99.get(d)!.push(out.latencyMsP99);
      }
    }
    for (const d of ORDER) {
      const atLoad = loadP99.get(d);
      rows.push({
        design: d,
        writers,
        eventsPerSecond: figure(eps.get(d)!, 'events/s'),
        eventsPerCpuSecond: figure(epc.get(d)!, 'events/CPU-s'),
        latencyMsP50: figure(p50.get(d)!, 'ms'),
        latencyMsP99: figure(p99.get(d)!, 'ms'),
        aSpeedup: ratioFigure(eps.get('a')!, eps.get(d)!),
        aCpuAdvantage: ratioFigure(epc.get('a')!, epc.get(d)!),
        latencyP50OverA: ratioFigure(p50.get(d)!, p50.get('a')!),
        latencyP99OverA: ratioFigure(p99.get(d)!, p99.get('a')!),
        ...(atLoad
          ? {
              loadLatencyMsP99: figure(atLoad, 'ms'),
              loadLatencyP99OverA: ratioFigure(atLoad, loadP99.get('a')!),
            }
          : {}),
        store: medianNotes(notes.get(d)!),
      });
    }
  }
  return {
    description:
      "The same event stream (per chunk: token progress, offload key and GPU block, each from its own source) through each design, dispatched by the same rule (storeWindow); writers hand over their publications once per round (one chunk index over every request) in every design. events/s = publications / (go -> last dispatch); events/CPU-s = publications / process CPU time over the run (process.cpuUsage: every thread, user + system); latency = last source publication -> dispatch, per chunk. The latency at load runs every threaded design again with writers paced to a fixed total of loadFraction x the slowest design's median events/s, over loadChunks chunks per request.",
    loadChunks: options.loadChunks ?? shape.chunks,
    requests: shape.requests,
    chunksPerRequest: shape.chunks,
    eventsPerRun: events,
    batch: options.batch,
    designs: DESIGNS,
    limits: DESIGN_LIMITS,
    loads,
    rows,
  };
}

function medianNotes(runs: readonly Record<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const key of Object.keys(runs[0] ?? {})) out[key] = median(runs.map((r) => r[key] ?? 0));
  return out;
}
