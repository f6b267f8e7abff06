// The soak's memory samples, laid out up front. The harness runs on the main
// thread whose heap it measures: a growing array of sample objects (one a
// second, about 700 bytes each) was exactly what a 50-minute soak saw as the
// main thread's heap floor rising from 8.5 to 10.8 MiB. One Float64Array sized
// for the whole run holds the figures instead; the objects are built once, after
// the run, for the judge and the report.
import type { RuntimeMemory, WorkerMemory } from '../../src/runtime/memory.js';

/** Roles whose memory a sample may carry, in column order after main. */
const ROLES = ['scheduler', 'hasher', 'allocator', 'store'] as const;
/** atS, lifecycles, jobsHeld, rssBytes. */
const HEAD_COLUMNS = 4;
/** heapUsedBytes, externalBytes, heapLiveBytes. */
const WORKER_COLUMNS = 3;

export interface MemoryPoint {
  atS: number;
  lifecycles: number;
  /** Store jobs the planner held at that moment (dispatched, not completed). */
  jobsHeld: number;
  memory: RuntimeMemory;
}

export class SampleLog {
  private readonly columns: number;
  private readonly rows: Float64Array;
  private count = 0;
  /** Samples that found the log full (0 unless the run outlasted its capacity). */
  dropped = 0;

  /**
   * @param capacity samples the run may take (its seconds plus a margin)
   * @param transfers transfer threads the runtime runs (their memory columns)
   */
  constructor(
    readonly capacity: number,
    private readonly transfers: number,
  ) {
    // main + the roles + each transfer thread, three figures each.
    this.columns = HEAD_COLUMNS + WORKER_COLUMNS * (1 + ROLES.length + transfers);
    this.rows = new Float64Array(capacity * this.columns);
  }

  add(atS: number, lifecycles: number, jobsHeld: number, m: RuntimeMemory): void {
    if (this.count >= this.capacity) {
      this.dropped += 1;
      return;
    }
    let at = this.count * this.columns;
    const put = (v: number) => (this.rows[at++] = v);
    const putWorker = (w: WorkerMemory | undefined) => {
      // NaN: the worker has not sampled (yet): it is left out of that point.
      put(w?.heapUsedBytes ?? NaN);
      put(w?.externalBytes ?? NaN);
      // NaN: no full collection has been asked for (or run) yet.
      put(w?.heapLiveBytes ?? NaN);
    };
    put(atS);
    put(lifecycles);
    put(jobsHeld);
    put(m.rssBytes);
    putWorker(m.main);
    for (const role of ROLES) putWorker(m[role]);
    for (let t = 0; t < this.transfers; t += 1) putWorker(m.transfer[t]);
    this.count += 1;
  }

  /** The samples as objects, in order. */
  points(): MemoryPoint[] {
    const out: MemoryPoint[] = [];
    for (let i = 0; i < this.count; i += 1) {
      let at = i * this.columns;
      const get = () => this.rows[at++]!;
      const getWorker = (): WorkerMemory | undefined => {
        const heapUsedBytes = get();
        const externalBytes = get();
        const heapLiveBytes = get();
        if (Number.isNaN(heapUsedBytes)) return undefined;
        return Number.isNaN(heapLiveBytes)
          ? { heapUsedBytes, externalBytes }
          : { heapUsedBytes, externalBytes, heapLiveBytes };
      };
      const atS = get();
      const lifecycles = get();
      const jobsHeld = get();
      const rssBytes = get();
      const memory: RuntimeMemory = { rssBytes, main: getWorker()!, transfer: [] };
      for (const role of ROLES) {
        const w = getWorker();
        if (w !== undefined) memory[role] = w;
      }
      for (let t = 0; t < this.transfers; t += 1) {
        const w = getWorker();
        if (w !== undefined) memory.transfer.push(w);
      }
      out.push({ atS, lifecycles, jobsHeld, memory });
    }
    return out;
  }
}
