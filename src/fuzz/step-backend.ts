// The runtime fuzzer's transfer backend: tasks queue on submit and each one runs
// (copies, unpins) only when the strategy picks the transfer role, so a copy can
// be overtaken by anything the other roles do. Its completion then waits for
// the store role's next step. Given the store's doorbell it rings it, as the
// default backend's copy rings do (PiscinaTransferBackend's completionBell);
// without one, the store finds the completion when it next wakes on its own, as
// with a backend module of the embedder's own, which has no bell. With more
// than one copy thread, any of the oldest tasks may run first. A task chosen
// to fail runs the real copy code's cleanup
// (a failed store task still unpins every source block, as runTransferTask's
// `finally` does) and completes with ok = false.
import type { TransferBackend, TransferCompletion } from '../runtime/backend.js';
import type { Doorbell } from '../runtime/doorbell.js';
import { unpinBlocks } from '../pins.js';
import {
  attachArenas,
  runTransferTask,
  storeTaskBlocks,
  taskJobId,
  taskKind,
  TASK_LOAD,
} from '../runtime/transfer.js';
import type { AttachedArenas, TransferArenas } from '../runtime/transfer.js';

export interface StepTask {
  readonly jobId: number;
  readonly kind: 'store' | 'load';
  /** Submission order, from 0. */
  readonly index: number;
  readonly words: Int32Array;
}

export class StepTransferBackend implements TransferBackend {
  readonly name = 'fuzzer-steps';
  private readonly arenas: AttachedArenas;
  private readonly queue: StepTask[] = [];
  private done: TransferCompletion[] = [];
  private submitted = 0;
  /** Submission indexes of the tasks that fail. */
  private readonly failing: ReadonlySet<number>;

  /** Every load task fails. */
  private readonly failLoads: boolean;
  /** Rung after each completion (the store's doorbell); undefined: no bell. */
  private readonly completionBell: Doorbell | undefined;

  constructor(
    arenas: TransferArenas,
    failing: ReadonlySet<number> = new Set(),
    failLoads = false,
    completionBell?: Doorbell,
  ) {
    this.arenas = attachArenas(arenas);
    this.failing = failing;
    this.failLoads = failLoads;
    this.completionBell = completionBell;
  }

  get inFlight(): number {
    return this.queue.length + this.done.length;
  }

  /** Tasks submitted and not yet run. */
  get queued(): number {
    return this.queue.length;
  }

  submit(task: Int32Array): void {
    const kind = taskKind(task) === TASK_LOAD ? 'load' : 'store';
    // The store role may reuse its array: keep our own copy, as postMessage would.
    this.queue.push({ jobId: taskJobId(task), kind, index: this.submitted, words: task.slice() });
    this.submitted += 1;
  }

  /**
   * Runs queued task `index` (0: the oldest; a pool of n threads runs any of
   * the n oldest); returns it (undefined when there is no such task).
   */
  runNext(index = 0): StepTask | undefined {
    if (index < 0 || index >= this.queue.length) return undefined;
    const t = this.queue.splice(index, 1)[0]!;
    if (this.failing.has(t.index) || (t.kind === 'load' && this.failLoads)) {
      if (t.kind === 'store' && t.words[2] === 1)
        unpinBlocks(this.arenas.pins, storeTaskBlocks(t.words));
      this.done.push({
        jobId: t.jobId,
        kind: t.kind,
        ok: false,
        bytes: 0,
        latencyMs: 0,
        error: new Error(`injected transfer failure (${t.kind} task ${t.index})`),
      });
    } else {
      const bytes = runTransferTask(this.arenas, t.words);
      this.done.push({ jobId: t.jobId, kind: t.kind, ok: true, bytes, latencyMs: 0 });
    }
    // As runTransferRing does: the completion is published, then the bell rung.
    this.completionBell?.ring();
    return t;
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
