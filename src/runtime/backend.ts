// The transfer backend: copy tasks in, completions out. The store role submits
// and collects; what moves the bytes is pluggable. Two backends ship: the
// default shared-memory backend on piscina threads (the arenas are handed to
// them once, through workerData; each thread drains a job ring of small Int32
// tasks and answers through a completion ring and a doorbell), and an inline
// backend that copies on the caller's thread (single-thread drivers and tests).
// A host can plug in its own (transferBackendModule).
import { isAbsolute } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { Piscina } from 'piscina';
import { InvalidArgumentError, invariant } from '../errors.js';
import { Doorbell } from './doorbell.js';
import { SpscRing, ringBufferBytes } from './rings.js';
import {
  COMPLETION_HEAD_WORDS,
  RING_BELL,
  RING_ERROR_CHARS_MAX,
  RING_READY,
  RING_STOP,
  RING_WORDS_BYTES,
  attachArenas,
  decodeCompletion,
  runTransferTask,
  taskJobId,
  taskKind,
  TASK_LOAD,
} from './transfer.js';
import type { AttachedArenas, TransferArenas, TransferRingSpec } from './transfer.js';
import { piscinaExecArgv, workerUrl } from './worker-files.js';

export interface TransferCompletion {
  readonly jobId: number;
  readonly kind: 'store' | 'load';
  readonly ok: boolean;
  readonly bytes: number;
  readonly latencyMs: number;
  readonly error?: unknown;
}

export interface TransferBackend {
  readonly name: string;
  /** Tasks submitted and not yet collected by takeCompletions. */
  readonly inFlight: number;
  submit(task: Int32Array): void;
  /** Completions since the last call, in completion order. */
  takeCompletions(): TransferCompletion[];
  /** Waits for in-flight tasks (bounded by the caller) and frees threads. */
  close(): Promise<void>;
}

export class InlineTransferBackend implements TransferBackend {
  readonly name = 'inline';
  private readonly arenas: AttachedArenas;
  private done: TransferCompletion[] = [];

  constructor(arenas: TransferArenas) {
    this.arenas = attachArenas(arenas);
  }
  get inFlight(): number {
    return this.done.length;
  }
  submit(task: Int32Array): void {
    const t0 = performance.now();
    const kind = taskKind(task) === TASK_LOAD ? 'load' : 'store';
    try {
      const bytes = runTransferTask(this.arenas, task);
      this.done.push({
        jobId: taskJobId(task),
        kind,
        ok: true,
        bytes,
        latencyMs: performance.now() - t0,
      });
    } catch (error) {
      this.done.push({ jobId: taskJobId(task), kind, ok: false, bytes: 0, latencyMs: 0, error });
    }
  }
  takeCompletions(): TransferCompletion[] {
    const out = this.done;
    this.done = [];
    return out;
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

export interface PiscinaBackendOptions {
  threads: number;
  /**
   * The doorbell rung after completions are published: the store's, so a
   * store parked on it wakes as soon as a copy is done. Absent: a private
   * word (callers poll takeCompletions).
   */
  completionBell?: Doorbell;
  /** Largest task in words (from the config); sizes the job rings. */
  taskWordsMax?: number;
  /** Lower priority for the transfer threads (piscina niceIncrement; Unix: 0..19). */
  niceIncrement?: number;
  /** Memory words where thread i samples its own heap, at slot firstSlot + i (the runtime's stats). */
  memory?: { buffer: SharedArrayBuffer; firstSlot: number };
}

/** Tasks queued per transfer thread at most; the rest wait in the backend (bounded by the caller). */
const RING_TASKS_MAX = 256;
/** Longest close() waits for a thread to see its stop flag (a copy in progress finishes first). */
const CLOSE_WAIT_MS_MAX = 30_000;
const READY_WAIT_MS_MAX = 60_000;

interface Ticket {
  readonly jobId: number;
  readonly kind: 'store' | 'load';
  readonly thread: number;
  readonly submittedAtEpochMs: number;
}

interface RingThread {
  readonly spec: TransferRingSpec;
  readonly jobs: SpscRing;
  readonly done: SpscRing;
  readonly words: Int32Array;
  inFlight: number;
}

/**
 * The default backend: a shared-memory job ring per transfer thread. piscina
 * starts and keeps the threads; each runs one long-lived task
 * (runTransferRing) that drains its ring and publishes completions into a
 * completion ring, then rings `completionBell`. Submitting is a ring push and
 * a notify; collecting is a ring pop. No message crosses per job.
 */
export class PiscinaTransferBackend implements TransferBackend {
  readonly name = 'piscina-ring';
  private readonly pool: Piscina<TransferRingSpec, number>;
  private readonly threads: RingThread[];
  private readonly running: Promise<number>[];
  private readonly tickets = new Map<number, Ticket>();
  /** Tasks that did not fit their thread's ring yet, oldest first. */
  private readonly waiting: { ticket: number; task: Int32Array }[] = [];
  private nextTicket = 1;
  private submitted = 0;
  private fatal: unknown;
  private done: TransferCompletion[] = [];
  private readonly onCompletion = (r: Int32Array) => this.completed(r);

  constructor(arenas: TransferArenas, options: PiscinaBackendOptions) {
    const bell =
      options.completionBell ?? new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
    const taskWords = Math.max(1024, (options.taskWordsMax ?? 0) + 2);
    // A record must fit in half the ring (SpscRing.recordWordsMax).
    const jobWords = Math.max(1 << 16, nextPowerOfTwo(2 * (taskWords + 2)));
    const doneWords = nextPowerOfTwo(
      2 * RING_TASKS_MAX * (COMPLETION_HEAD_WORDS + 1) + 4 * RING_ERROR_CHARS_MAX,
    );
    const memory = options.memory;
    this.threads = Array.from({ length: options.threads }, (_, i) => {
      const spec: TransferRingSpec = {
        jobs: new SharedArrayBuffer(ringBufferBytes(jobWords)),
        done: new SharedArrayBuffer(ringBufferBytes(doneWords)),
        words: new SharedArrayBuffer(RING_WORDS_BYTES),
        completionBell: bell.words.buffer as SharedArrayBuffer,
        completionBellIndex: bell.index,
        ...(memory ? { memory: { buffer: memory.buffer, slot: memory.firstSlot + i } } : {}),
      };
      return {
        spec,
        jobs: new SpscRing(spec.jobs),
        done: new SpscRing(spec.done),
        words: new Int32Array(spec.words),
        inFlight: 0,
      };
    });
    this.pool = new Piscina({
      filename: workerUrl('transfer').href,
      workerData: arenas,
      minThreads: options.threads,
      maxThreads: options.threads,
      // One long-lived task per thread, never more.
      maxQueue: options.threads,
      concurrentTasksPerWorker: 1,
      idleTimeout: Infinity,
      niceIncrement: options.niceIncrement ?? 0,
      execArgv: piscinaExecArgv(),
    });
    this.running = this.threads.map((t) =>
      this.pool.run(t.spec).catch((error: unknown) => {
        this.fatal ??= error;
        bell.ring();
        return 0;
      }),
    );
  }

  get inFlight(): number {
    return this.submitted;
  }

  /** Resolves once every thread runs its ring (so the first copy does not pay for start-up). */
  async warmUp(): Promise<void> {
    const deadline = performance.now() + READY_WAIT_MS_MAX;
    for (const t of this.threads) {
      while (Atomics.load(t.words, RING_READY) === 0) {
        if (this.fatal !== undefined) throw this.fatal;
        invariant(performance.now() < deadline, 'transfer threads start within a minute');
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    }
  }

  /** Tasks queued in each thread's ring, for diagnostics. */
  get poolState(): { queued: number; threads: number; inFlightPerThread: number[] } {
    return {
      queued: this.waiting.length,
      threads: this.pool.threads.length,
      inFlightPerThread: this.threads.map((t) => t.inFlight),
    };
  }

  submit(task: Int32Array): void {
    const ticket = this.nextTicket++;
    this.submitted += 1;
    this.waiting.push({ ticket, task });
    this.tickets.set(ticket, {
      jobId: taskJobId(task),
      kind: taskKind(task) === TASK_LOAD ? 'load' : 'store',
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

  async close(): Promise<void> {
    for (const t of this.threads) {
      Atomics.store(t.words, RING_STOP, 1);
      ring(t.words);
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(this.running),
      new Promise((resolve) => {
        timer = setTimeout(resolve, CLOSE_WAIT_MS_MAX);
      }),
    ]).finally(() => clearTimeout(timer));
    await this.pool.destroy();
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

/**
 * A copy backend of your own: a module whose `createTransferBackend(arenas,
 * options)` returns a TransferBackend (or a promise of one). The store
 * worker loads it with `import()`; tasks and arenas are those of
 * `runTransferTask` (src/runtime/transfer.ts). `options` are those the
 * runtime gives its own PiscinaTransferBackend (`threads`, the store's
 * `completionBell`, ...): pass them on to wrap it, or ring
 * `options.completionBell` after a copy completes so the store wakes at once.
 */
export interface TransferBackendModule {
  createTransferBackend(
    arenas: TransferArenas,
    options: PiscinaBackendOptions,
  ): TransferBackend | Promise<TransferBackend>;
}

/**
 * Where the store worker imports a backend module from: a URL as is, an
 * absolute path as a file URL, a package name as is. A relative path is
 * refused: it would resolve against kvoff's files, not the caller's.
 */
export function backendModuleHref(module: string | URL): string {
  if (module instanceof URL) return module.href;
  if (typeof module !== 'string' || module === '') {
    throw new InvalidArgumentError(
      'transferBackendModule',
      'must be a URL, an absolute path or a package name',
    );
  }
  if (isAbsolute(module)) return pathToFileURL(module).href;
  if (module.startsWith('.')) {
    throw new InvalidArgumentError(
      'transferBackendModule',
      "a relative path resolves against kvoff's files: pass new URL('./backend.mjs', import.meta.url)",
    );
  }
  return module;
}

/** Loads `href` and checks it exports the factory; a bad module is a typed error, thrown before any copy. */
export async function loadTransferBackendModule(href: string): Promise<TransferBackendModule> {
  let mod: Partial<TransferBackendModule>;
  try {
    mod = (await import(href)) as Partial<TransferBackendModule>;
  } catch (err) {
    throw new InvalidArgumentError(
      'transferBackendModule',
      `could not be imported: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (typeof mod.createTransferBackend !== 'function') {
    throw new InvalidArgumentError(
      'transferBackendModule',
      'must export a function createTransferBackend(arenas, { threads })',
    );
  }
  return mod as TransferBackendModule;
}

/** The backend a module makes, checked to have the TransferBackend shape. */
export async function createModuleBackend(
  href: string,
  arenas: TransferArenas,
  options: PiscinaBackendOptions,
): Promise<TransferBackend> {
  const backend = await (
    await loadTransferBackendModule(href)
  ).createTransferBackend(arenas, options);
  const ok =
    typeof backend === 'object' &&
    backend !== null &&
    typeof backend.submit === 'function' &&
    typeof backend.takeCompletions === 'function' &&
    typeof backend.close === 'function' &&
    typeof backend.inFlight === 'number';
  if (!ok) {
    throw new InvalidArgumentError(
      'transferBackendModule',
      'createTransferBackend must return { inFlight, submit, takeCompletions, close }',
    );
  }
  return backend;
}
