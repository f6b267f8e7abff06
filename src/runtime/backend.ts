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
import type { TransferBackend, TransferCompletion } from './backend-types.js';
import { RingClient, createRingThreadBuffers } from './ring-client.js';
import {
  RING_READY,
  RING_WORDS_BYTES,
  attachArenas,
  runTransferTask,
  taskJobId,
  taskRank,
  taskKind,
  TASK_LOAD,
  bytesBeforeFailure,
} from './transfer.js';
import type { AttachedArenas, TransferArenas, TransferRingSpec } from './transfer.js';
import { piscinaExecArgv, workerUrl } from './worker-files.js';

export type { TransferBackend, TransferCompletion } from './backend-types.js';

export class InlineTransferBackend implements TransferBackend {
  readonly name = 'inline';
  /** It copies within submit: never busy when the store plans. */
  readonly capacity = Infinity;
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
        rank: taskRank(task),
        ok: true,
        bytes,
        latencyMs: performance.now() - t0,
      });
    } catch (error) {
      this.done.push({
        jobId: taskJobId(task),
        kind,
        rank: taskRank(task),
        ok: false,
        bytes: bytesBeforeFailure(error),
        latencyMs: 0,
        error,
      });
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

/** Longest close() waits for a thread to see its stop flag (a copy in progress finishes first). */
const CLOSE_WAIT_MS_MAX = 30_000;
const READY_WAIT_MS_MAX = 60_000;

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
  private readonly specs: TransferRingSpec[];
  private readonly client: RingClient;
  private readonly running: Promise<number>[];
  private fatal: unknown;

  constructor(arenas: TransferArenas, options: PiscinaBackendOptions) {
    const bell =
      options.completionBell ?? new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
    const memory = options.memory;
    this.specs = Array.from({ length: options.threads }, (_, i) => ({
      ...createRingThreadBuffers(options.taskWordsMax, RING_WORDS_BYTES),
      completionBell: bell.words.buffer as SharedArrayBuffer,
      completionBellIndex: bell.index,
      ...(memory ? { memory: { buffer: memory.buffer, slot: memory.firstSlot + i } } : {}),
    }));
    this.client = new RingClient(this.specs);
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
    this.running = this.specs.map((spec) =>
      this.pool.run(spec).catch((error: unknown) => {
        this.fatal ??= error;
        this.client.failAll(error);
        bell.ring();
        return 0;
      }),
    );
  }

  get inFlight(): number {
    return this.client.inFlight;
  }

  /**
   * One copy per thread: a thread copies its ring's tasks one after another,
   * so a task queued behind a running one gains nothing over a larger job
   * planned when a thread is free.
   */
  get capacity(): number {
    return this.specs.length;
  }

  /** Resolves once every thread runs its ring (so the first copy does not pay for start-up). */
  async warmUp(): Promise<void> {
    const deadline = performance.now() + READY_WAIT_MS_MAX;
    for (const spec of this.specs) {
      const words = new Int32Array(spec.words);
      while (Atomics.load(words, RING_READY) === 0) {
        if (this.fatal !== undefined) throw this.fatal;
        invariant(performance.now() < deadline, 'transfer threads start within a minute');
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    }
  }

  /** Tasks queued in each thread's ring, for diagnostics. */
  get poolState(): { queued: number; threads: number; inFlightPerThread: number[] } {
    return { ...this.client.state, threads: this.pool.threads.length };
  }

  submit(task: Int32Array): void {
    this.client.submit(task);
  }

  takeCompletions(): TransferCompletion[] {
    return this.client.takeCompletions();
  }

  async close(): Promise<void> {
    this.client.stop();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(this.running),
      new Promise((resolve) => {
        timer = setTimeout(resolve, CLOSE_WAIT_MS_MAX);
      }),
    ]).finally(() => clearTimeout(timer));
    await this.pool.destroy();
  }
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
