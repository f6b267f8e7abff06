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
//
// Its capacity (TransferBackend.capacity) is the scenario's: the store plans a
// pass only while fewer tasks than that are in flight, so held passes and the
// larger jobs they gather meet every ordering the steps make.
//
// With `maps` (a WebGPU device's way), running a task only makes the GPU's
// copy: a store's source blocks are read into a staging buffer of its own, a
// load's tier slots into an upload buffer. The task completes at a later
// transfer step that resolves one of the staged maps, any of them (late and
// out of order, as map promises resolve): only then are the staged bytes
// written to their destination, the source pins released and the completion
// published. A task chosen to fail fails there, as a failed map does.
import type { TransferBackend, TransferCompletion } from '../runtime/backend.js';
import type { Doorbell } from '../runtime/doorbell.js';
import { unpinBlocks } from '../pins.js';
import {
  attachArenas,
  runTransferTask,
  storeTaskBlocks,
  taskJobId,
  taskKind,
  taskRank,
  taskShard,
  taskUnpins,
  TASK_LOAD,
} from '../runtime/transfer.js';
import type { AttachedArenas, TransferArenas } from '../runtime/transfer.js';
import { gpuBlockWords, tierBlockWords } from '../copy.js';

export interface StepTask {
  readonly jobId: number;
  readonly kind: 'store' | 'load';
  /** The tensor-parallel rank the task copies for (0 with one rank). */
  readonly rank: number;
  /** Submission order, from 0. */
  readonly index: number;
  readonly words: Int32Array;
}

/** A task whose GPU copy ran and whose map has not resolved: the bytes it read, and where they go. */
interface StagedTask {
  readonly task: StepTask;
  /** Each block's bytes as the copy read them, and the words they are written to when the map resolves. */
  readonly blocks: readonly { readonly into: Uint32Array; readonly bytes: Uint32Array }[];
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
  /** Copies complete when a later step resolves their map (see the file comment). */
  private readonly maps: boolean;
  private readonly staged: StagedTask[] = [];
  /** Copy tasks the store may have in flight before it holds its passes (Infinity: never held). */
  readonly capacity: number;

  constructor(
    arenas: TransferArenas,
    failing: ReadonlySet<number> = new Set(),
    failLoads = false,
    completionBell?: Doorbell,
    maps = false,
    capacity = Infinity,
  ) {
    this.arenas = attachArenas(arenas);
    this.failing = failing;
    this.failLoads = failLoads;
    this.completionBell = completionBell;
    this.maps = maps;
    this.capacity = capacity;
  }

  get inFlight(): number {
    return this.queue.length + this.staged.length + this.done.length;
  }

  /** Copies made whose maps have not resolved (maps only). */
  get mapsPending(): number {
    return this.staged.length;
  }

  /** Tasks not yet completed: queued, or copied with their map pending. */
  get pending(): number {
    return this.queue.length + this.staged.length;
  }

  /** Tasks submitted and not yet run. */
  get queued(): number {
    return this.queue.length;
  }

  submit(task: Int32Array): void {
    const kind = taskKind(task) === TASK_LOAD ? 'load' : 'store';
    // The store role may reuse its array: keep our own copy, as postMessage would.
    this.queue.push({
      jobId: taskJobId(task),
      kind,
      rank: taskRank(task),
      index: this.submitted,
      words: task.slice(),
    });
    this.submitted += 1;
  }

  /**
   * Runs queued task `index` (0: the oldest; a pool of n threads runs any of
   * the n oldest); returns it (undefined when there is no such task).
   */
  runNext(index = 0): StepTask | undefined {
    if (index < 0 || index >= this.queue.length) return undefined;
    const t = this.queue.splice(index, 1)[0]!;
    if (this.maps) {
      this.staged.push(this.stage(t));
      return t;
    }
    this.complete(t, () => runTransferTask(this.arenas, t.words));
    return t;
  }

  /** Resolves staged map `index` (any of them: maps resolve in any order); returns its task. */
  resolveMap(index: number): StepTask | undefined {
    if (index < 0 || index >= this.staged.length) return undefined;
    const { task, blocks } = this.staged.splice(index, 1)[0]!;
    this.complete(task, () => {
      for (const b of blocks) b.into.set(b.bytes);
      if (task.kind === 'store' && taskUnpins(task.words)) {
        unpinBlocks(this.arenas.pins, storeTaskBlocks(task.words));
      }
      let bytes = 0;
      for (const b of blocks) bytes += b.bytes.length * 4;
      return bytes;
    });
    return task;
  }

  /** The GPU's copy of a task: its source bytes now, their destination for later. */
  private stage(t: StepTask): StagedTask {
    const { gpu, tier, geometry } = this.arenas;
    const w = t.words;
    const blocks: { into: Uint32Array; bytes: Uint32Array }[] = [];
    // The task's rank's shard of each block only (the whole block with one rank).
    const { from: lo, to: hi } = taskShard(w, geometry.wordsPerBlock);
    let at = 5;
    if (t.kind === 'load') {
      for (let i = 0; i < w[4]!; i += 1, at += 3) {
        const from = tierBlockWords(tier, geometry, w[at]!, w[at + 1]!).subarray(lo, hi);
        const into = gpuBlockWords(gpu, geometry, w[at + 2]!).subarray(lo, hi);
        if (hi > lo) blocks.push({ into, bytes: from.slice() });
      }
      return { task: t, blocks };
    }
    for (let c = 0; c < w[4]!; c += 1) {
      const tierSlot = w[at++]!;
      const n = w[at++]!;
      for (let i = 0; i < n; i += 1, at += 2) {
        const from = gpuBlockWords(gpu, geometry, w[at]!).subarray(lo, hi);
        const into = tierBlockWords(
          tier,
          geometry,
          tierSlot,
          w[at + 1]! % geometry.blocksPerChunk,
        ).subarray(lo, hi);
        if (hi > lo) blocks.push({ into, bytes: from.slice() });
      }
    }
    return { task: t, blocks };
  }

  /** Publishes `t`'s completion: `copy` runs unless the task is chosen to fail. */
  private complete(t: StepTask, copy: () => number): void {
    if (this.failing.has(t.index) || (t.kind === 'load' && this.failLoads)) {
      if (t.kind === 'store' && taskUnpins(t.words))
        unpinBlocks(this.arenas.pins, storeTaskBlocks(t.words));
      this.done.push({
        jobId: t.jobId,
        kind: t.kind,
        rank: t.rank,
        ok: false,
        bytes: 0,
        latencyMs: 0,
        error: new Error(`injected transfer failure (${t.kind} task ${t.index})`),
      });
    } else {
      const bytes = copy();
      this.done.push({ jobId: t.jobId, kind: t.kind, rank: t.rank, ok: true, bytes, latencyMs: 0 });
    }
    // As runTransferRing does: the completion is published, then the bell rung.
    this.completionBell?.ring();
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
