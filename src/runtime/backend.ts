// The transfer backend: copy tasks in, completions out. The store role submits
// and collects; what moves the bytes is pluggable. Two backends ship: the
// default shared-memory backend on a piscina pool (the arenas are handed to its
// threads once, through workerData; each task is a small Int32Array), and an
// inline backend that copies on the caller's thread (single-thread drivers and
// tests).
import { isAbsolute } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { InvalidArgumentError } from '../errors.js';
import { Piscina } from 'piscina';
import {
  attachArenas,
  runTransferTask,
  taskJobId,
  taskKind,
  TASK_LOAD,
  TASK_STORE,
} from './transfer.js';
import type { AttachedArenas, TransferArenas } from './transfer.js';
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
}

export class PiscinaTransferBackend implements TransferBackend {
  readonly name = 'piscina-shared-memory';
  private readonly pool: Piscina<Int32Array, number>;
  private submitted = 0;
  private done: TransferCompletion[] = [];

  constructor(arenas: TransferArenas, options: PiscinaBackendOptions) {
    this.pool = new Piscina({
      filename: workerUrl('transfer').href,
      workerData: arenas,
      minThreads: options.threads,
      maxThreads: options.threads,
      // Unbounded queues are not allowed: the store role never has more than this in flight.
      maxQueue: 4096,
      execArgv: piscinaExecArgv(),
    });
  }
  get inFlight(): number {
    return this.submitted;
  }
  /** Runs an empty task on every thread so the first real copy does not pay for thread start-up. */
  async warmUp(threads: number): Promise<void> {
    const empty = new Int32Array([TASK_STORE, 0, 0, 0, 0]);
    await Promise.all(Array.from({ length: threads }, () => this.pool.run(empty)));
  }

  /** piscina's own view, for diagnostics. */
  get poolState(): { queued: number; completed: number; threads: number } {
    return {
      queued: this.pool.queueSize,
      completed: this.pool.completed,
      threads: this.pool.threads.length,
    };
  }
  submit(task: Int32Array): void {
    const t0 = performance.now();
    const jobId = taskJobId(task);
    const kind = taskKind(task) === TASK_LOAD ? 'load' : 'store';
    this.submitted += 1;
    this.pool.run(task).then(
      (bytes) => {
        this.done.push({ jobId, kind, ok: true, bytes, latencyMs: performance.now() - t0 });
      },
      (error: unknown) => {
        this.done.push({
          jobId,
          kind,
          ok: false,
          bytes: 0,
          latencyMs: performance.now() - t0,
          error,
        });
      },
    );
  }
  takeCompletions(): TransferCompletion[] {
    const out = this.done;
    this.done = [];
    this.submitted -= out.length;
    return out;
  }
  async close(): Promise<void> {
    await this.pool.close();
  }
}

/**
 * A copy backend of your own: a module whose `createTransferBackend(arenas,
 * { threads })` returns a TransferBackend (or a promise of one). The store
 * worker loads it with `import()`; tasks and arenas are those of
 * `runTransferTask` (src/runtime/transfer.ts).
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
