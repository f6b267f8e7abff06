// A transfer backend with a capacity, for design aSized: `capacity` copy lanes
// (as the piscina pool's threads), each copying one job at a time for
// COPY_US_PER_JOB + COPY_US_PER_CHUNK x its chunks of wall time; a job
// submitted while every lane is busy waits for the lane that frees first (as
// a task queued in a thread's ring). No bytes move: the times are stand-ins
// for a copy thread's round trip and its per-chunk copy, so the run shows what
// sizing jobs by the backend does to the store's CPU and latency, not a copy.
// Completions are found by the store thread at its next turn (collect), as the
// runtime's store collects a completion ring.
import type { StoreJob } from '../../src/job.js';

/** A copy's fixed cost (submit, the copy thread's wake-up, its completion): a stand-in. */
const COPY_US_PER_JOB = 10;
/** A copy's cost per chunk: a stand-in for a few tens of KiB of memcpy. */
const COPY_US_PER_CHUNK = 2;
/** Copy lanes: the runtime's default transfer threads. */
export const COPY_LANES = 2;

export class BenchCopyEngine {
  readonly capacity: number;
  /** When each lane is free again (epoch ms). */
  private readonly laneFreeMs: Float64Array;
  /** Jobs submitted and not collected, with their due times; preallocated to `jobsMax`. */
  private readonly jobs: (StoreJob | undefined)[];
  private readonly dueMs: Float64Array;
  private n = 0;

  constructor(capacity: number, jobsMax: number) {
    this.capacity = capacity;
    this.laneFreeMs = new Float64Array(capacity);
    this.jobs = new Array<StoreJob | undefined>(jobsMax).fill(undefined);
    this.dueMs = new Float64Array(jobsMax);
  }

  /** Jobs submitted and not yet collected (TransferBackend.inFlight). */
  get inFlight(): number {
    return this.n;
  }

  submit(job: StoreJob, nowMs: number): void {
    if (this.n >= this.jobs.length) throw new Error('bench copy engine: more jobs than jobsMax');
    let lane = 0;
    for (let i = 1; i < this.capacity; i += 1) {
      if (this.laneFreeMs[i]! < this.laneFreeMs[lane]!) lane = i;
    }
    const start = Math.max(nowMs, this.laneFreeMs[lane]!);
    const due = start + (COPY_US_PER_JOB + COPY_US_PER_CHUNK * job.chunks.length) / 1000;
    this.laneFreeMs[lane] = due;
    this.jobs[this.n] = job;
    this.dueMs[this.n] = due;
    this.n += 1;
  }

  /** Hands every copy due by `nowMs` to `done`; returns how many. */
  collect(nowMs: number, done: (job: StoreJob) => void): number {
    let completed = 0;
    for (let i = 0; i < this.n;) {
      if (this.dueMs[i]! > nowMs) {
        i += 1;
        continue;
      }
      const job = this.jobs[i]!;
      // Swap-remove: completion order among due copies does not matter to the planner.
      this.n -= 1;
      this.jobs[i] = this.jobs[this.n];
      this.dueMs[i] = this.dueMs[this.n]!;
      this.jobs[this.n] = undefined;
      done(job);
      completed += 1;
    }
    return completed;
  }

  /** Earliest due time in flight (Infinity when none). */
  nextDueMs(): number {
    let next = Infinity;
    for (let i = 0; i < this.n; i += 1) next = Math.min(next, this.dueMs[i]!);
    return next;
  }
}
