// Bench threads: a few long-lived workers that run one task each per round.
// A round is: post every thread its task, wait until all report ready (setup
// done, JIT warm), release them together with one shared "go" word, optionally
// raise "stop" after a fixed duration, and collect one result per thread.
// Spawning a tsx worker costs ~0.5 s, so threads are reused across rounds.
import type { TransferListItem, Worker } from 'node:worker_threads';
import { spawnWorker } from '../../src/runtime/worker-files.js';
import { epochMs, sleepMs } from './clock.js';
import { processCpuUs, threadCpuMs } from './cpu.js';

/** Longest a thread may wait for "go" or a round may take before it counts as hung. */
const ROUND_TIMEOUT_MS = 120_000;
const GO = 0;
const STOP = 1;
const START_MS = 1; // Float64 index (bytes 8..15)

/** The shared words of one round: go, stop, and the start time every thread measures from. */
export class Round {
  readonly buffer: SharedArrayBuffer;
  private readonly words: Int32Array;
  private readonly times: Float64Array;

  constructor(buffer = new SharedArrayBuffer(16)) {
    this.buffer = buffer;
    this.words = new Int32Array(buffer, 0, 2);
    this.times = new Float64Array(buffer, 0, 2);
  }

  /** Main thread: release every thread. */
  go(): void {
    this.times[START_MS] = epochMs();
    Atomics.store(this.words, GO, 1);
    Atomics.notify(this.words, GO);
  }

  /** Main thread: ask duration-bound threads to end their loops. */
  stop(): void {
    Atomics.store(this.words, STOP, 1);
  }

  /** Worker threads only (blocks): waits for go, bounded. */
  waitGo(): void {
    const deadline = epochMs() + ROUND_TIMEOUT_MS;
    while (Atomics.load(this.words, GO) === 0) {
      if (epochMs() > deadline)
        throw new Error('bench thread: no go signal within the round timeout');
      Atomics.wait(this.words, GO, 0, 50);
    }
  }

  get started(): boolean {
    return Atomics.load(this.words, GO) === 1;
  }

  get stopped(): boolean {
    return Atomics.load(this.words, STOP) === 1;
  }

  /** Epoch ms at go (valid once started). */
  get startMs(): number {
    return this.times[START_MS]!;
  }
}

export interface ThreadTask {
  readonly kind: string;
  readonly params: unknown;
  readonly transfer?: readonly TransferListItem[];
}

export interface RoundOptions {
  /** Raise stop this long after go (duration-bound tasks); omit for tasks that end by themselves. */
  readonly durationMs?: number;
  readonly timeoutMs?: number;
  /**
   * Also measure the CPU of every thread but this (main) one from go to the
   * last result, read while every bench thread is parked (see
   * bench/lib/cpu.ts): 1 ms of wall time before go and after the results.
   */
  readonly cpu?: boolean;
}

/** Posted to each thread before the pool terminates it; the thread answers with the same once it is done (a CPU profile written). */
export const CLOSE_MESSAGE = 'close';
/** How long a closing thread may take to write its profile. */
const CLOSE_WAIT_MS = 10_000;

/** Time the threads get to park before the CPU reading on either side of a measured round. */
const CPU_SETTLE_MS = 1;

type ThreadMessage =
  { type: 'ready' } | { type: 'result'; result: unknown } | { type: 'error'; error: string };

export class ThreadPool {
  private readonly workers: Worker[];
  private closed = false;

  private constructor(workers: Worker[]) {
    this.workers = workers;
  }

  static async open(count: number): Promise<ThreadPool> {
    const url = new URL('../workers/bench-thread.ts', import.meta.url);
    const workers = Array.from({ length: count }, () => spawnWorker(url));
    const pool = new ThreadPool(workers);
    try {
      await Promise.all(workers.map((w) => once(w, 'online')));
    } catch (error) {
      await pool.close();
      throw error;
    }
    return pool;
  }

  get size(): number {
    return this.workers.length;
  }

  /** Runs one task per thread (tasks.length <= size) and returns their results in order. */
  async run(tasks: readonly ThreadTask[], options: RoundOptions = {}): Promise<unknown[]> {
    return (await this.runTimed(tasks, options)).results;
  }

  /** As run, also returning the epoch ms at which every thread was released. */
  async runTimed(
    tasks: readonly ThreadTask[],
    options: RoundOptions = {},
  ): Promise<{ results: unknown[]; startMs: number; cpuMs: number }> {
    if (tasks.length > this.workers.length) throw new Error('more tasks than bench threads');
    const timeoutMs = options.timeoutMs ?? ROUND_TIMEOUT_MS;
    const round = new Round();
    const ready: Promise<void>[] = [];
    const results: Promise<unknown>[] = [];
    tasks.forEach((task, i) => {
      const w = this.workers[i]!;
      const { ready: r, result } = listen(w, timeoutMs);
      ready.push(r);
      results.push(result);
      w.postMessage({ kind: task.kind, params: task.params, round: round.buffer }, [
        ...(task.transfer ?? []),
      ]);
    });
    // A thread that fails during setup rejects its result; surface that instead of hanging.
    await Promise.race([Promise.all(ready), Promise.all(results)]);
    // The main thread's own CPU (posting, collecting results) is the harness's:
    // after a sleep its counter is current, so it is taken out (where Linux says).
    if (options.cpu) await sleepMs(CPU_SETTLE_MS);
    const cpuAtGoUs = processCpuUs();
    const mainAtGoMs = threadCpuMs();
    round.go();
    if (options.durationMs !== undefined) {
      await sleepMs(options.durationMs);
      round.stop();
    }
    const settled = await Promise.all(results);
    if (options.cpu) await sleepMs(CPU_SETTLE_MS);
    const mainMs = threadCpuMs() - mainAtGoMs;
    const cpuMs = (processCpuUs() - cpuAtGoUs) / 1000 - (Number.isFinite(mainMs) ? mainMs : 0);
    return { results: settled, startMs: round.startMs, cpuMs };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all(this.workers.map((w) => closed(w)));
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** Asks a thread to finish (see CLOSE_MESSAGE); resolves when it answers, exits or takes too long. */
function closed(w: Worker): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      w.off('message', onMessage);
      w.off('exit', done);
      resolve();
    };
    const onMessage = (m: unknown) => {
      if (m === CLOSE_MESSAGE) done();
    };
    const timer = setTimeout(done, CLOSE_WAIT_MS);
    w.on('message', onMessage);
    w.on('exit', done);
    w.postMessage(CLOSE_MESSAGE);
  });
}

function once(w: Worker, event: 'online'): Promise<void> {
  return new Promise((resolve, reject) => {
    w.once(event, () => resolve());
    w.once('error', reject);
  });
}

/** Ready and result promises of one task on one worker; errors and timeouts reject the result. */
function listen(w: Worker, timeoutMs: number): { ready: Promise<void>; result: Promise<unknown> } {
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  const result = new Promise<unknown>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`bench thread did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    const onMessage = (m: ThreadMessage) => {
      if (m.type === 'ready') return markReady();
      cleanup();
      if (m.type === 'result') resolve(m.result);
      else reject(new Error(`bench thread failed: ${m.error}`));
    };
    const onError = (e: unknown) => {
      cleanup();
      reject(e instanceof Error ? e : new Error(String(e)));
    };
    const onExit = (code: number) => {
      cleanup();
      reject(new Error(`bench thread exited with code ${code}`));
    };
    const cleanup = () => {
      clearTimeout(timer);
      w.off('message', onMessage);
      w.off('error', onError);
      w.off('exit', onExit);
    };
    w.on('message', onMessage);
    w.on('error', onError);
    w.on('exit', onExit);
  });
  return { ready, result };
}
