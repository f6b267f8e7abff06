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
import { eventCount, writerSources } from './stream.js';
import type { StoreOutcome, StreamShape } from './stream.js';

export const DESIGNS = {
  a: 'kvoff shared-memory roles: lock-free, one writer per word, the store parks on a doorbell',
  b: 'message passing: a postMessage per delta to a store thread that applies it with the same role and planner code to state it owns',
  bBatched: 'as b, deltas batched into one Float64Array message per 64',
  c: 'one Atomics mutex around all state: the same role and planner code, every publication and every store pass under the lock',
  d: 'everything on one thread: the same role and planner code, a pass after every round of publications',
  bLean:
    'message passing written by hand with the least work: plain arrays and storeWindow, no role classes, planner, tier or pins',
  cLean:
    'one mutex written by hand with the least work: plain shared arrays and storeWindow, no role classes, planner, tier or pins',
} as const;
export type DesignName = keyof typeof DESIGNS;

export const DESIGN_LIMITS: Readonly<Record<DesignName, string>> = {
  a: 'Per event: the role method (handle check, validation, 3-6 atomic accesses) on the writer, and on the store a pass that snapshots every slot (12 + 3G Atomics.load each, a builtin call on Node 20) to find the few that changed. With 3 writers and the store there are 4 busy threads on 2 cores: the OS time-slices them, which sets throughput and the latency tail.',
  b: 'Per delta: a structured clone on the writer and one event-loop task on the store, which then runs the same role and planner code serially; writers outrun the store with no backpressure, so latency is queueing behind the backlog.',
  bBatched:
    'Fewer, larger messages amortise the per-message cost, but every delta waits for its batch to fill; the store still applies deltas one by one.',
  c: 'Every publication and every store pass serialise on one lock word; a pass holds the lock while it scans every request, and a thread that cannot get the lock sleeps in Atomics.wait (a syscall), so writers and the store convoy.',
  d: 'No concurrency and no cross-core traffic: one core does all the work, bounding what the work itself costs; it cannot overlap with an engine and leaves the second core idle.',
  bLean: 'The message cost alone (clone + event-loop task) with almost no work per delta.',
  cLean:
    'The lock alone with almost no work per event: short critical sections, so contention is brief.',
};
export interface DesignOptions {
  readonly shape: StreamShape;
  readonly writerCounts: readonly number[];
  readonly repeats: number;
  readonly batch: number;
}

export interface DesignRow {
  readonly design: DesignName;
  readonly writers: number;
  readonly eventsPerSecond: Figure;
  readonly latencyMsP50: Figure;
  readonly latencyMsP99: Figure;
  /** a's events/s divided by this design's, paired per repeat (> 1: a is faster). */
  readonly aSpeedup: Figure;
  /** This design's latency divided by a's, paired per repeat (> 1: a is lower). */
  readonly latencyP50OverA: Figure;
  readonly latencyP99OverA: Figure;
  /** Medians of the store's own counters (passes, jobs, messages, snapshot retries). */
  readonly store: Record<string, number>;
}

export interface DesignResults {
  readonly description: string;
  readonly requests: number;
  readonly chunksPerRequest: number;
  readonly eventsPerRun: number;
  readonly batch: number;
  readonly designs: typeof DESIGNS;
  readonly limits: typeof DESIGN_LIMITS;
  readonly rows: readonly DesignRow[];
}

const ORDER: readonly DesignName[] = ['a', 'b', 'bBatched', 'c', 'd', 'bLean', 'cLean'];

async function runOnce(
  pool: ThreadPool,
  design: DesignName,
  shape: StreamShape,
  writers: number,
  batch: number,
): Promise<StoreOutcome> {
  const split = writerSources(writers);
  let tasks: ThreadTask[];
  if (design === 'd') return runSingleThreadDesign(shape);
  if (design === 'a' || design === 'c') {
    const setup = { ...setupKvoffDesign(shape), lock: newLockBuffer(), shape };
    const kind = design === 'a' ? 'design-a' : 'design-c';
    tasks = [
      { kind: `${kind}-store`, params: setup },
      ...split.map((sources) => ({ kind: `${kind}-writer`, params: { ...setup, sources } })),
    ];
  } else if (design === 'cLean') {
    const setup = setupMutexDesign(shape);
    tasks = [
      { kind: 'lean-mutex-store', params: setup },
      ...split.map((sources) => ({ kind: 'lean-mutex-writer', params: { ...setup, sources } })),
    ];
  } else {
    const channels = split.map(() => new MessageChannel());
    const ports = channels.map((ch) => ch.port1);
    tasks = [
      {
        kind: design === 'bLean' ? 'lean-message-store' : 'design-b-store',
        params: { shape, ports },
        transfer: ports,
      },
      ...split.map((sources, i) => {
        const port = channels[i]!.port2;
        return {
          kind: 'message-writer',
          params: { shape, sources, port, batch: design === 'bBatched' ? batch : 1 },
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
  for (const writers of options.writerCounts) {
    // One unrecorded run of each design first: JIT warm-up in every thread.
    for (const d of ORDER) await runOnce(pool, d, shape, writers, options.batch);
    const eps = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const p50 = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const p99 = new Map<DesignName, number[]>(ORDER.map((d) => [d, []]));
    const notes = new Map<DesignName, Record<string, number>[]>(ORDER.map((d) => [d, []]));
    for (let rep = 0; rep < options.repeats; rep += 1) {
      for (let k = 0; k < ORDER.length; k += 1) {
        const d = ORDER[(k + rep) % ORDER.length]!;
        const out = await runOnce(pool, d, shape, writers, options.batch);
        eps.get(d)!.push(events / (out.elapsedMs / 1000));
        p50.get(d)!.push(out.latencyMsP50);
        p99.get(d)!.push(out.latencyMsP99);
        notes.get(d)!.push(out.notes ?? {});
      }
    }
    for (const d of ORDER) {
      rows.push({
        design: d,
        writers,
        eventsPerSecond: figure(eps.get(d)!, 'events/s'),
        latencyMsP50: figure(p50.get(d)!, 'ms'),
        latencyMsP99: figure(p99.get(d)!, 'ms'),
        aSpeedup: ratioFigure(eps.get('a')!, eps.get(d)!),
        latencyP50OverA: ratioFigure(p50.get(d)!, p50.get('a')!),
        latencyP99OverA: ratioFigure(p99.get(d)!, p99.get('a')!),
        store: medianNotes(notes.get(d)!),
      });
    }
  }
  return {
    description:
      'The same event stream (per chunk: token progress, offload key and GPU block, each from its own source) through each design, dispatched by the same rule (storeWindow). events/s = publications / (go -> last dispatch); latency = last source publication -> dispatch, per chunk.',
    requests: shape.requests,
    chunksPerRequest: shape.chunks,
    eventsPerRun: events,
    batch: options.batch,
    designs: DESIGNS,
    limits: DESIGN_LIMITS,
    rows,
  };
}

function medianNotes(runs: readonly Record<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const key of Object.keys(runs[0] ?? {})) out[key] = median(runs.map((r) => r[key] ?? 0));
  return out;
}
