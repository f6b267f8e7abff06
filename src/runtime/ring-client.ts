// The submitting side of copy threads that answer through rings: a job ring
// and a completion ring per thread (src/runtime/transfer.ts has the record
// layouts), tickets for what is in flight, and a bounded queue of tasks that
// did not fit a ring yet. The default backend's piscina threads and the
// WebGPU backend's GPU thread are both driven through it, so tickets,
// feeding and collecting are written once.
import { performance } from 'node:perf_hooks';
import { invariant } from '../errors.js';
import type { TransferCompletion } from './backend-types.js';
import { SpscRing, ringBufferBytes } from './rings.js';
import {
  COMPLETION_HEAD_WORDS,
  RING_BELL,
  RING_ERROR_CHARS_MAX,
  RING_STOP,
  decodeCompletion,
  taskJobId,
  taskRank,
  taskKind,
  TASK_LOAD,
} from './transfer.js';

/** Tasks queued per copy thread at most; the rest wait in the client (bounded by the caller). */
const RING_TASKS_MAX = 256;

/** The rings and control words of one copy thread. */
export interface RingThreadBuffers {
  readonly jobs: SharedArrayBuffer;
  readonly done: SharedArrayBuffer;
  readonly words: SharedArrayBuffer;
}

/** Ring sizes for tasks of at most `taskWordsMax` words (from the config). */
function ringWords(taskWordsMax = 0): { jobs: number; done: number } {
  const taskWords = Math.max(1024, taskWordsMax + 2);
  // A record must fit in half the ring (SpscRing.recordWordsMax).
  return {
    jobs: Math.max(1 << 16, nextPowerOfTwo(2 * (taskWords + 2))),
    done: nextPowerOfTwo(
      2 * RING_TASKS_MAX * (COMPLETION_HEAD_WORDS + 1) + 4 * RING_ERROR_CHARS_MAX,
    ),
  };
}

/** A job ring and a completion ring for tasks of at most `taskWordsMax` words, and control words of `wordsBytes`. */
export function createRingThreadBuffers(
  taskWordsMax: number | undefined,
  wordsBytes: number,
): RingThreadBuffers {
  const sizes = ringWords(taskWordsMax);
  return {
    jobs: new SharedArrayBuffer(ringBufferBytes(sizes.jobs)),
    done: new SharedArrayBuffer(ringBufferBytes(sizes.done)),
    words: new SharedArrayBuffer(wordsBytes),
  };
}

interface Ticket {
  readonly jobId: number;
  readonly kind: 'store' | 'load';
  readonly rank: number;
  readonly thread: number;
  readonly submittedAtEpochMs: number;
}

interface RingThread {
  readonly jobs: SpscRing;
  readonly done: SpscRing;
  readonly words: Int32Array;
  inFlight: number;
}

export class RingClient {
  private readonly threads: RingThread[];
  private readonly tickets = new Map<number, Ticket>();
  /** Tasks that did not fit their thread's ring yet, oldest first. */
  private readonly waiting: { ticket: number; task: Int32Array }[] = [];
  private nextTicket = 1;
  private submitted = 0;
  private fatal: unknown;
  private done: TransferCompletion[] = [];
  private readonly onCompletion = (r: Int32Array) => this.completed(r);

  constructor(threads: readonly RingThreadBuffers[]) {
    this.threads = threads.map((t) => ({
      jobs: new SpscRing(t.jobs),
      done: new SpscRing(t.done),
      words: new Int32Array(t.words),
      inFlight: 0,
    }));
  }

  /** Submitted and not yet collected. */
  get inFlight(): number {
    return this.submitted;
  }

  /** Tasks waiting for ring room, and tasks in each thread's ring. */
  get state(): { queued: number; inFlightPerThread: number[] } {
    return { queued: this.waiting.length, inFlightPerThread: this.threads.map((t) => t.inFlight) };
  }

  /** The copy threads died (or the device they drive is gone): what is in flight fails with `cause`. */
  failAll(cause: unknown): void {
    this.fatal ??= cause;
  }

  submit(task: Int32Array): void {
    const ticket = this.nextTicket++;
    this.submitted += 1;
    this.waiting.push({ ticket, task });
    this.tickets.set(ticket, {
      jobId: taskJobId(task),
      kind: taskKind(task) === TASK_LOAD ? 'load' : 'store',
      rank: taskRank(task),
      thread: -1,
      submittedAtEpochMs: performance.timeOrigin + performance.now(),
    });
    this.feed();
  }

  takeCompletions(): TransferCompletion[] {
    for (const t of this.threads) t.done.drain(this.onCompletion, Number.MAX_SAFE_INTEGER);
    this.feed();
    if (this.fatal !== undefined) {
      // A thread's long-lived task died: everything still in flight fails with its cause.
      for (const [ticket, t] of this.tickets) {
        this.done.push({
          jobId: t.jobId,
          kind: t.kind,
          rank: t.rank,
          ok: false,
          bytes: 0,
          latencyMs: 0,
          error: this.fatal,
        });
        this.tickets.delete(ticket);
      }
      this.waiting.length = 0;
    }
    const out = this.done;
    this.done = [];
    this.submitted -= out.length;
    return out;
  }

  /** Raises every thread's stop flag and rings it. */
  stop(): void {
    for (const t of this.threads) {
      Atomics.store(t.words, RING_STOP, 1);
      ring(t.words);
    }
  }

  /** Moves waiting tasks into the least-loaded rings that have room. */
  private feed(): void {
    while (this.waiting.length > 0) {
      let best: RingThread | undefined;
      let bestIndex = -1;
      this.threads.forEach((t, i) => {
        if (t.inFlight < RING_TASKS_MAX && (best === undefined || t.inFlight < best.inFlight)) {
          best = t;
          bestIndex = i;
        }
      });
      if (best === undefined) return;
      const { ticket, task } = this.waiting[0]!;
      if (!best.jobs.pushParts([ticket], task)) return; // full: retried at the next collection
      this.waiting.shift();
      best.inFlight += 1;
      const t = this.tickets.get(ticket)!;
      this.tickets.set(ticket, { ...t, thread: bestIndex });
      ring(best.words);
    }
  }

  private completed(r: Int32Array): void {
    const c = decodeCompletion(r);
    const t = this.tickets.get(c.ticket);
    if (t === undefined) invariant(false, `transfer ticket ${c.ticket} was in flight`);
    this.tickets.delete(c.ticket);
    this.threads[t.thread]!.inFlight -= 1;
    this.done.push({
      jobId: t.jobId,
      kind: t.kind,
      rank: t.rank,
      ok: c.ok,
      bytes: c.bytes,
      latencyMs: Math.max(0, c.doneAtEpochMs - t.submittedAtEpochMs),
      ...(c.ok ? {} : { error: new Error(c.error) }),
    });
  }
}

function ring(words: Int32Array): void {
  Atomics.add(words, RING_BELL, 1);
  Atomics.notify(words, RING_BELL);
}

function nextPowerOfTwo(n: number): number {
  let p = 64;
  while (p < n) p *= 2;
  return p;
}
