// Benchmark 3: the four designs on the same event stream, side by side in
// every repeat (their order rotates between repeats so drift on a shared
// machine does not favour one), with ratios paired per repeat.
import { MessageChannel } from 'node:worker_threads';
import type { GcPauses } from '../lib/gc-pauses.js';
import { cpuJiffies, stealShare } from '../lib/steal.js';
import type { Figure } from '../lib/stats.js';
import { figure, median, ratioFigure } from '../lib/stats.js';
import type { ThreadPool, ThreadTask } from '../lib/threads.js';
import { setupKvoffDesign } from './kvoff.js';
import { newLockBuffer } from './kvoff-locked.js';
import { setupMutexDesign } from './lean-mutex.js';
import { setupSharedLeanDesign } from './lean-shared.js';
import {
  eventCount,
  latencySummary,
  newBellBuffer,
  newPubBuffer,
  roundMsFor,
  writerSources,
} from './stream.js';
import type { StoreOutcome, StreamShape, WriterOutcome } from './stream.js';

const DESIGNS = {
  a: 'kvoff shared-memory roles: lock-free, one writer per word, the store visits the slots whose dirty bit is set and parks on a doorbell',
  b: 'message passing done well: each writer sends transferred Float64Array batches (64 deltas, and at the end of each round) and rings a doorbell; the store drains its ports with receiveMessageOnPort, applies the deltas with the same role code to state it owns, then runs one planner pass',
  c: "one Atomics mutex around all state, taken once per batch (a writer's round of publications, the store's pass): the same role and planner code, without the seqlock re-check the lock makes moot",
  d: 'everything on one thread: the same role and planner code, a pass after every round of publications',
  aSized:
    "a with a transfer backend that has a capacity (2 copy lanes, each copy 10 us + 2 us per chunk of wall time, no bytes moved): the store plans a pass only while a lane is free, as the runtime's store does, so chunks that become ready while both lanes copy leave as one larger job per request",
  aLean:
    "kvoff's publication protocol alone, written by hand with the least work: single-writer counts published with Atomics.store after their entries, the dirty bitmap (one Atomics.or per word per batch; the store loads a word and exchanges it only when non-zero), the allocator's seqlock read around each snapshot, the same doorbell; plain shared arrays and storeWindow, no role classes, planner, tier or pins",
  bLean:
    'message passing written by hand with the least work, and handicapped by design: a postMessage per delta (an event-loop task each, which no one would write for this traffic), plain arrays and storeWindow, no role classes, planner, tier or pins; bLeanBatched is the message baseline done well',
  bLeanBatched:
    'as bLean, batched as in b: transferred Float64Array batches, receiveMessageOnPort, one window per touched request per drain',
  cLean:
    'one mutex per batch written by hand with the least work: plain shared arrays and storeWindow, no role classes, planner, tier or pins',
  floor:
    'the floor: the same stream on one thread over plain arrays, every publication first, then one window and one job per request; nothing is handed between threads (no atomic operation, lock, message or wake-up) and no job is smaller than it must be, so no design can spend less per event',
} as const;
export type DesignName = keyof typeof DESIGNS;

const DESIGN_LIMITS: Readonly<Record<DesignName, string>> = {
  a: 'Per event: the role method (handle check, validation, 3-6 atomic accesses, one Atomics.or on the dirty bitmap per bitmap word and batch) on the writer; on the store a pass that reads one bitmap word per 32 slots and snapshots only the slots that changed (12 + 3G Atomics.load each, a builtin call on Node 20), then per job its windows, pins, tier offer and completion. With 3 writers and the store there are 4 busy threads on 2 cores.',
  b: 'Per batch: a transfer (no payload clone) and a doorbell ring; per delta the same role code on the store thread, so the store does all role work serially while the writers only pack numbers.',
  c: 'Writers and the store serialise on one lock word per batch; a thread that misses the lock spins briefly, then sleeps in Atomics.wait (a syscall).',
  aSized:
    "As a per job and publication; fewer, larger jobs while the lanes are busy, and a chunk that becomes ready then waits for a lane (its latency is the copy's queue). The store thread also wakes for each copy's end.",
  d: 'No concurrency and no cross-core traffic: one core does all the work, bounding what the work itself costs; it cannot overlap with an engine and leaves the second core idle.',
  aLean:
    'Per event one Atomics.store of a count; per batch one Atomics.or per bitmap word and a doorbell ring; per visited slot six Atomics.load (bitmap, seqlock twice, three counts) and one exchange per non-empty bitmap word.',
  bLean:
    'The message cost alone (a structured clone and an event-loop task per delta) with almost no work per delta.',
  bLeanBatched:
    'The batched message mechanism with almost no work per delta: what message passing costs when done well.',
  cLean: 'The lock alone, once per batch, with almost no work per event.',
  floor:
    'Only the work itself: plain writes, one window per request and round, one job per window.',
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
  /** Chunks per request in the unrecorded warm-up runs of each design (default shape.chunks). */
  readonly warmupChunks?: number;
}

export interface DesignRow {
  readonly design: DesignName;
  readonly writers: number;
  readonly eventsPerSecond: Figure;
  /**
   * Events per CPU-second of the run: every thread's CPU (process.cpuUsage,
   * user + system) from go to the last dispatch, read by the bench threads
   * themselves, so thread setup, result messages and latency summaries are
   * not counted (see bench/lib/cpu.ts).
   */
  readonly eventsPerCpuSecond: Figure;
  /** CPU ns per event over the same interval (1e9 / eventsPerCpuSecond, per repeat). */
  readonly cpuNsPerEvent: Figure;
  /** The writer threads' own CPU ns per event (Linux: /proc/thread-self/schedstat); absent elsewhere and for one-thread designs. */
  readonly writerCpuNsPerEvent?: Figure;
  /** The store thread's own CPU ns per event, likewise. */
  readonly storeCpuNsPerEvent?: Figure;
  /**
   * The floor's row only: CPU ns per event of the hash stand-in alone, as
   * a's hasher role calls it per chunk (the lean designs are handed
   * precomputed keys), timed on the floor's thread outside its run.
   */
  readonly hashCpuNsPerEvent?: Figure;
  /**
   * Design a's row only: CPU ns per event of its writer role calls alone
   * (KvoffWriters on one bench thread, the hash stand-in included, no store),
   * a task of its own after each repeat's designs.
   */
  readonly roleCpuNsPerEvent?: Figure;
  /** Events per CPU-second of the process over the whole run, harness included (the measure before 2026-12). */
  readonly eventsPerCpuSecondWholeRun: Figure;
  /** This design's CPU ns per event over the floor's, paired per repeat (1: at the floor). */
  readonly cpuOverFloor: Figure;
  /** aLean's events per CPU-second over this design's, paired per repeat (> 1: the mechanism alone is cheaper). */
  readonly aLeanCpuAdvantage: Figure;
  readonly latencyMsP50: Figure;
  readonly latencyMsP99: Figure;
  /** a's events/s divided by this design's, paired per repeat (> 1: a is faster). */
  readonly aSpeedup: Figure;
  /** a's events per CPU-second divided by this design's, paired per repeat (> 1: a is cheaper). */
  readonly aCpuAdvantage: Figure;
  readonly latencyP50OverA: Figure;
  readonly latencyP99OverA: Figure;
  /** At the fixed offered load: p99 publication -> dispatch (absent for d and the floor, which are not threaded). */
  readonly loadLatencyMsP99?: Figure;
  /** At the fixed offered load: this design's p99 over a's, paired per repeat (> 1: a is lower). */
  readonly loadLatencyP99OverA?: Figure;
  /** At the fixed offered load: garbage-collection pauses per run, every thread of the design from go on. */
  readonly loadGcPauses?: Figure;
  /** At the fixed offered load: the longest of those pauses in a run. */
  readonly loadGcPauseMsMax?: Figure;
  /** At the fixed offered load: the store thread's own CPU per run. */
  readonly loadStoreCpuMs?: Figure;
  /** At the fixed offered load: medians of the store's counters (a and aSized: its passes over 0.2 ms of wall time, their sum, the longest). */
  readonly loadStore?: Record<string, number>;
  /** Medians of the store's own counters (passes, jobs, messages, snapshot retries). */
  readonly store: Record<string, number>;
}

interface DesignLoad {
  readonly writers: number;
  /** The VM's hypervisor steal over the paced runs (see bench/lib/steal.ts); absent before 2026-12-02 or off Linux. */
  readonly stealShare?: number;
  /** The slowest threaded design by median events/s, and that median. */
  readonly slowestDesign: DesignName;
  readonly slowestEventsPerSecond: number;
  readonly offeredEventsPerSecond: number;
}

export interface DesignResults {
  /** How events/CPU-s was measured: 'run' (go -> last dispatch, every thread) or absent (the whole run, before 2026-12). */
  readonly cpuMeasure?: 'run';
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

const ORDER: readonly DesignName[] = [
  'a',
  'aSized',
  'b',
  'c',
  'd',
  'aLean',
  'bLean',
  'bLeanBatched',
  'cLean',
  'floor',
];
/** Unrecorded runs of each design before the measured ones, per writer count. */
const WARMUP_RUNS = 2;
const ONE_THREAD: readonly DesignName[] = ['d', 'floor'];
const THREADED: readonly DesignName[] = ORDER.filter((d) => !ONE_THREAD.includes(d));

interface Measured {
  readonly out: StoreOutcome;
  /** CPU of every thread from go to the last result (the one-thread designs: their loop). */
  readonly runCpuMs: number;
  /** CPU of the process over the whole run, harness included. */
  readonly wholeCpuMs: number;
  /** The writer threads' and the store thread's own CPU (NaN where unknown or one thread). */
  readonly writerCpuMs: number;
  readonly storeCpuMs: number;
  /** The floor: the hash stand-in alone (NaN for every other design). */
  readonly hashCpuMs: number;
  /** Every thread's collections from go on, summed (count, total) and the longest. */
  readonly gc: GcPauses;
  readonly latencyMsP50: number;
  readonly latencyMsP99: number;
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
  const run = await runDesign(pool, design, shape, writers, batch, roundMs);
  const cpu = process.cpuUsage(cpu0);
  // After every CPU reading: the summary of the latencies is harness work.
  const { p50, p99 } = latencySummary(run.store.latenciesMs);
  return {
    ...run,
    out: run.store,
    wholeCpuMs: (cpu.user + cpu.system) / 1000,
    latencyMsP50: p50,
    latencyMsP99: p99,
  };
}

interface DesignRun {
  readonly store: StoreOutcome;
  readonly gc: GcPauses;
  readonly runCpuMs: number;
  readonly writerCpuMs: number;
  readonly storeCpuMs: number;
  readonly hashCpuMs: number;
}

async function runDesign(
  pool: ThreadPool,
  design: DesignName,
  shape: StreamShape,
  writers: number,
  batch: number,
  roundMs?: number,
): Promise<DesignRun> {
  if (design === 'd' || design === 'floor') {
    const kind = design === 'd' ? 'design-d' : 'design-floor';
    const round = await pool.runTimed([{ kind, params: { shape } }], { cpu: true });
    const store = round.results[0] as StoreOutcome & {
      publishCpuMs?: number;
      hashCpuMs?: number;
    };
    checkDispatched(design, shape, store);
    // The floor's two phases: the publications (the writers' side) and the windows and jobs (the store's).
    const publish = store.publishCpuMs;
    return {
      store,
      gc: gcOf([store]),
      runCpuMs: round.cpuMs,
      writerCpuMs: publish ?? Number.NaN,
      storeCpuMs: publish === undefined ? Number.NaN : store.threadCpuMs,
      hashCpuMs: store.hashCpuMs ?? Number.NaN,
    };
  }
  const split = writerSources(writers);
  const pace = roundMs === undefined ? {} : { roundMs };
  let tasks: ThreadTask[];
  if (design === 'aLean') {
    const setup = setupSharedLeanDesign(shape);
    tasks = [
      { kind: 'lean-shared-store', params: setup },
      ...split.map((sources) => ({
        kind: 'lean-shared-writer',
        params: { ...setup, sources, ...pace },
      })),
    ];
  } else if (design === 'a' || design === 'aSized' || design === 'c') {
    const setup = { ...setupKvoffDesign(shape), lock: newLockBuffer(), shape };
    const kind = design === 'c' ? 'design-c' : 'design-a';
    // The paced runs time a's passes (see KvoffStore.timePasses); the others do not pay for it.
    const storeParams = design === 'c' ? setup : { ...setup, timePasses: roundMs !== undefined };
    tasks = [
      {
        kind: design === 'aSized' ? 'design-aSized-store' : `${kind}-store`,
        params: storeParams,
      },
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
    const pub = newPubBuffer(shape);
    const storeKind =
      design === 'bLean'
        ? 'lean-message-store'
        : design === 'bLeanBatched'
          ? 'lean-batched-message-store'
          : 'design-b-store';
    tasks = [
      { kind: storeKind, params: { shape, ports, bell, pub }, transfer: ports },
      ...split.map((sources, i) => {
        const port = channels[i]!.port2;
        return {
          kind: 'message-writer',
          params: {
            shape,
            sources,
            port,
            pub,
            batch: design === 'bLean' ? 1 : batch,
            ...(design === 'bLean' ? {} : { bell }),
            ...pace,
          },
          transfer: [port],
        };
      }),
    ];
  }
  const round = await pool.runTimed(tasks, { cpu: true });
  const [store, ...writerOutcomes] = round.results as [StoreOutcome, ...WriterOutcome[]];
  checkDispatched(design, shape, store);
  return {
    store,
    gc: gcOf(round.results),
    runCpuMs: round.cpuMs,
    writerCpuMs: writerOutcomes.reduce((n, w) => n + w.threadCpuMs, 0),
    storeCpuMs: store.threadCpuMs,
    hashCpuMs: Number.NaN,
  };
}

/** Design a's writer role calls alone, CPU ns per event (see kvoffRoleCallsThread). */
async function roleCallsNsPerEvent(pool: ThreadPool, shape: StreamShape): Promise<number> {
  const round = await pool.runTimed([{ kind: 'design-a-role-calls', params: { shape } }]);
  const out = round.results[0] as { events: number; threadCpuMs: number };
  return (out.threadCpuMs * 1e6) / out.events;
}

/** The collections of every thread of a run (bench-thread adds each thread's `gc`). */
function gcOf(results: readonly unknown[]): GcPauses {
  let count = 0;
  let msMax = 0;
  let msTotal = 0;
  for (const r of results) {
    const gc = (r as { gc?: GcPauses }).gc;
    if (gc === undefined) continue;
    count += gc.count;
    msMax = Math.max(msMax, gc.msMax);
    msTotal += gc.msTotal;
  }
  return { count, msMax, msTotal };
}

function checkDispatched(design: DesignName, shape: StreamShape, store: StoreOutcome): void {
  const expected = shape.requests * shape.chunks;
  if (store.dispatchedChunks !== expected) {
    throw new Error(`design ${design}: dispatched ${store.dispatchedChunks} of ${expected} chunks`);
  }
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
    // Unrecorded runs of each design first: JIT warm-up in every thread. V8
    // optimises on background threads while a run goes on, so one short run
    // left later runs compiling (and that CPU counted).
    const warmup = { ...shape, chunks: options.warmupChunks ?? shape.chunks };
    for (let i = 0; i < WARMUP_RUNS; i += 1) {
      for (const d of ORDER) await runOnce(pool, d, warmup, writers, options.batch);
    }
    const series = () => new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const eps = series();
    const epc = series();
    const epcWhole = series();
    const cpuNs = series();
    const writerNs = series();
    const storeNs = series();
    const hashNs = series();
    const roleNs = series();
    const p50 = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const p99 = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const notes = new Map<DesignName, Record<string, number>[]>(ORDER.map((d) => [d, []]));
    for (let rep = 0; rep < options.repeats; rep += 1) {
      for (let k = 0; k < ORDER.length; k += 1) {
        const d = ORDER[(k + rep) % ORDER.length]!;
        const m = await runOnce(pool, d, shape, writers, options.batch);
        const { out } = m;
        eps.get(d)!.push(events / (out.elapsedMs / 1000));
        epc.get(d)!.push(events / (m.runCpuMs / 1000));
        epcWhole.get(d)!.push(events / (m.wholeCpuMs / 1000));
        cpuNs.get(d)!.push((m.runCpuMs * 1e6) / events);
        writerNs.get(d)!.push((m.writerCpuMs * 1e6) / events);
        storeNs.get(d)!.push((m.storeCpuMs * 1e6) / events);
        hashNs.get(d)!.push((m.hashCpuMs * 1e6) / events);
        p50.get(d)!.push(m.latencyMsP50);
        p99.get(d)!.push(m.latencyMsP99);
        notes.get(d)!.push(out.notes ?? {});
      }
    }
    // Latency at a fixed offered load: a fraction of the slowest threaded design's capacity.
    const slowest = THREADED.reduce((x, y) => (median(eps.get(y)!) < median(eps.get(x)!) ? y : x));
    const slowestEps = median(eps.get(slowest)!);
    const offered = fraction * slowestEps;
    const load = {
      writers,
      slowestDesign: slowest,
      slowestEventsPerSecond: slowestEps,
      offeredEventsPerSecond: offered,
    };
    const loadShape = { ...shape, chunks: options.loadChunks ?? shape.chunks };
    const roundMs = roundMsFor(loadShape, offered);
    const loadP99 = new Map<DesignName, number[]>(THREADED.map((d) => [d, []]));
    const loadGc = new Map<DesignName, number[]>(THREADED.map((d) => [d, []]));
    const loadGcMax = new Map<DesignName, number[]>(THREADED.map((d) => [d, []]));
    const loadStoreCpuMs = new Map<DesignName, number[]>(THREADED.map((d) => [d, []]));
    const loadNotes = new Map<DesignName, Record<string, number>[]>(THREADED.map((d) => [d, []]));
    const jiffiesBefore = cpuJiffies();
    for (let rep = 0; rep < options.repeats; rep += 1) {
      for (let k = 0; k < THREADED.length; k += 1) {
        const d = THREADED[(k + rep) % THREADED.length]!;
        const m = await runOnce(pool, d, loadShape, writers, options.batch, roundMs);
        loadP99.get(d)!.push(m.latencyMsP99);
        loadGc.get(d)!.push(m.gc.count);
        loadGcMax.get(d)!.push(m.gc.msMax);
        loadStoreCpuMs.get(d)!.push(m.storeCpuMs);
        loadNotes.get(d)!.push(m.out.notes ?? {});
      }
    }
    const steal = stealShare(jiffiesBefore, cpuJiffies());
    loads.push(Number.isFinite(steal) ? { ...load, stealShare: steal } : load);
    // Last: its set-up and garbage land in the next writer count's warm-up
    // runs, which are not recorded (run between measured designs, the next
    // one's CPU carried its collections).
    for (let rep = 0; rep < options.repeats; rep += 1) {
      roleNs.get('a')!.push(await roleCallsNsPerEvent(pool, shape));
    }
    for (const d of ORDER) {
      const atLoad = loadP99.get(d);
      const perThread = (m: Map<DesignName, number[]>) =>
        m.get(d)!.every(Number.isFinite) ? figure(m.get(d)!, 'ns/event') : undefined;
      const writerCpu = perThread(writerNs);
      const storeCpu = perThread(storeNs);
      const hashCpu = perThread(hashNs);
      const roleCpu = roleNs.get(d)!.length > 0 ? perThread(roleNs) : undefined;
      rows.push({
        design: d,
        writers,
        eventsPerSecond: figure(eps.get(d)!, 'events/s'),
        eventsPerCpuSecond: figure(epc.get(d)!, 'events/CPU-s'),
        cpuNsPerEvent: figure(cpuNs.get(d)!, 'ns/event'),
        ...(writerCpu ? { writerCpuNsPerEvent: writerCpu } : {}),
        ...(storeCpu ? { storeCpuNsPerEvent: storeCpu } : {}),
        ...(hashCpu ? { hashCpuNsPerEvent: hashCpu } : {}),
        ...(roleCpu ? { roleCpuNsPerEvent: roleCpu } : {}),
        eventsPerCpuSecondWholeRun: figure(epcWhole.get(d)!, 'events/CPU-s'),
        cpuOverFloor: ratioFigure(cpuNs.get(d)!, cpuNs.get('floor')!),
        aLeanCpuAdvantage: ratioFigure(epc.get('aLean')!, epc.get(d)!),
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
              loadGcPauses: figure(loadGc.get(d)!, 'pauses/run'),
              loadGcPauseMsMax: figure(loadGcMax.get(d)!, 'ms'),
              ...(loadStoreCpuMs.get(d)!.every(Number.isFinite)
                ? { loadStoreCpuMs: figure(loadStoreCpuMs.get(d)!, 'ms') }
                : {}),
              loadStore: medianNotes(loadNotes.get(d)!),
            }
          : {}),
        store: medianNotes(notes.get(d)!),
      });
    }
  }
  return {
    description:
      "The same event stream (per chunk: token progress, offload key and GPU block, each from its own source) through each design, dispatched by the same rule (storeWindow); writers hand over their publications once per round (one chunk index over every request) in every design, and stamp each source's round with one clock read. events/s = publications / (go -> last dispatch); events/CPU-s = publications / the CPU time of every thread from go to the last dispatch (process.cpuUsage read by the bench threads; eventsPerCpuSecondWholeRun counts the whole run, harness included); writer and store CPU per event from each thread's own counter (/proc/thread-self/schedstat); latency = last source publication -> dispatch, per chunk. The floor is the same stream on one thread with nothing handed over. The latency at load runs every threaded design again with writers paced to a fixed total of loadFraction x the slowest design's median events/s, over loadChunks chunks per request.",
    cpuMeasure: 'run',
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
