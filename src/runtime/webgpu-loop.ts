// The loop that serves a WebGPU device's rings on the thread that owns the
// device (a device belongs to the thread that opened it): kvoff's GPU thread,
// or an engine's own thread that hands kvoff its KV buffers. It runs the store
// role's copy tasks (a job ring in, a completion ring out, as a piscina
// transfer thread does) and, on kvoff's own arena, the simulated engine's KV
// writes and checks (a ring in, an answer ring out). It is asynchronous: a
// copy completes when its staging map resolves, on this thread's event loop,
// so it never blocks on a map and parks with Atomics.waitAsync, bounded, when
// idle (on a main thread too).
//
// Order: a store job must read the KV the engine wrote before the store saw
// the block as ready. The engine pushes its write before it publishes, the
// store pushes its job after it read the publication, so a write is in the KV
// ring before the job is in the job ring. The loop therefore notes how far the
// KV ring was written right after it pops a job, and starts the job only once
// it has read the KV ring up to there: the writes are then submitted to the
// queue ahead of the copy, and the queue executes in submission order. Writes
// pushed after that point never hold the job back.
import { invariant } from '../errors.js';
import { unpinBlocks } from '../pins.js';
import { Doorbell } from './doorbell.js';
import { MemorySampler } from './memory.js';
import type { RingThreadBuffers } from './ring-client.js';
import { SpscRing } from './rings.js';
import { PARK_MS_MAX } from './thread-words.js';
import {
  COMPLETION_RECORD_WORDS_MAX,
  RING_BELL,
  RING_READY,
  RING_STOP,
  TASK_LOAD,
  encodeCompletion,
  storeTaskBlocks,
  taskUnpins,
} from './transfer.js';
import type { GpuArena } from './webgpu-arena.js';
import { GpuCopier } from './webgpu-copy.js';
import type { MapHold } from './webgpu-copy.js';
import { describe } from './webgpu-device.js';
import { BlockKernels } from './webgpu-kernels.js';
import { KV_CHECK, KV_WRITE, decodeKvEntries } from './webgpu-kv.js';
import type { KvRingBuffers } from './webgpu-kv.js';

/** Test-only control words, beside the ring words (bell 0, stop 16, ready 32). */
export const GPU_HOLD_MAPS = 48;
export const GPU_MAPS_HELD = 49;
export const GPU_LOSE_DEVICE = 50;
export const GPU_WORDS_BYTES = 64 * 4;

/** Copy jobs started (or popped and waiting for the KV drain) at once, at most: the backend's capacity. */
export const GPU_JOBS_IN_FLIGHT_MAX = 64;
/** Staging bytes of the jobs in flight, at most (one job always runs, whatever its size). */
const STAGING_BYTES_IN_FLIGHT_MAX = 256 << 20;
/** KV records handled per loop turn before the loop yields. */
const KV_RECORDS_PER_TURN_MAX = 256;
/** After the stop flag: how long copies in flight get to finish. */
const STOP_WAIT_MS_MAX = 30_000;
/** Longest stop() waits, after destroying the buffers, for the maps that destroy rejects. */
const MAPS_AFTER_DESTROY_MS_MAX = 1_000;
/** Longest a held map (test-only) waits for its release. */
const HOLD_WAIT_MS_MAX = 30_000;

/** The rings and shared memory a copy loop serves (structured-cloned to a thread: the buffers are shared). */
export interface GpuRings extends RingThreadBuffers, KvRingBuffers {
  /** The doorbell rung after completions are published (the store's). */
  readonly completionBell: SharedArrayBuffer;
  readonly completionBellIndex: number;
  readonly memory?: { readonly buffer: SharedArrayBuffer; readonly slot: number };
  readonly tierArena: SharedArrayBuffer;
  readonly pins: SharedArrayBuffer;
  readonly gpuBlocks: number;
  readonly wordsPerBlock: number;
  readonly blocksPerChunk: number;
  /** Rung after an answer is published (the engine's doorbell), if anyone parks on it. */
  readonly kvAnswerBell?: { readonly buffer: SharedArrayBuffer; readonly index: number };
}

/** Counters a copy loop reports when it ends. */
export interface GpuCopyReport {
  readonly storeJobs: number;
  readonly loadJobs: number;
  readonly jobsFailed: number;
  readonly bytesStored: number;
  readonly bytesLoaded: number;
  readonly blocksWritten: number;
  readonly blocksChecked: number;
  /** KV blocks whose kernel dispatch the device refused (their bytes were never written). */
  readonly kvWritesRefused: number;
  /** Jobs that were still queued at the stop and failed without a copy. */
  readonly jobsFailedAtStop: number;
}

interface Job {
  readonly ticket: number;
  readonly task: Int32Array;
  readonly bytes: number;
  /** How far the KV ring was written when the job was popped (SpscRing.producedTo). */
  readonly kvMark: number;
}

export class GpuCopyLoop {
  private readonly device: GPUDevice;
  private readonly words: Int32Array;
  private readonly bell: Doorbell;
  private readonly completionBell: Doorbell;
  private readonly answerBell: Doorbell | undefined;
  private readonly jobs: SpscRing;
  private readonly done: SpscRing;
  private readonly kv: SpscRing;
  private readonly answers: SpscRing;
  private readonly arena: GpuArena;
  private readonly copier: GpuCopier;
  private readonly pins: Int32Array;
  /** kvoff's KV kernels: on its own GPU thread (the simulated engine's KV); undefined on an engine's device. */
  private readonly kernels: BlockKernels | undefined;
  private readonly memory: MemorySampler | undefined;
  /** Popped, waiting for a KV drain that reached the ring's end. */
  private held: Job[] = [];
  private running = 0;
  private bytesInFlight = 0;
  /** Completion records the completion ring had no room for yet, oldest first. */
  private readonly unsent: Int32Array[] = [];
  /** Check answers the answer ring had no room for yet. */
  private readonly unanswered: Int32Array[] = [];
  private checksRunning = 0;
  private lostOnRequest = false;
  private storeJobs = 0;
  private loadJobs = 0;
  private jobsFailed = 0;
  private bytesStored = 0;
  private bytesLoaded = 0;
  private blocksWritten = 0;
  private blocksChecked = 0;
  private kvWritesRefused = 0;

  /**
   * Serves `rings` on the calling thread with `device` (which must belong to
   * it) and `arena`. With `kernels`, also the KV ring (kvoff's own arena);
   * without, KV records are refused (the engine writes its own KV).
   */
  constructor(rings: GpuRings, device: GPUDevice, arena: GpuArena, kernels: boolean) {
    this.device = device;
    this.words = new Int32Array(rings.words);
    this.bell = new Doorbell(this.words, RING_BELL);
    this.completionBell = new Doorbell(
      new Int32Array(rings.completionBell),
      rings.completionBellIndex,
    );
    this.answerBell = rings.kvAnswerBell
      ? new Doorbell(new Int32Array(rings.kvAnswerBell.buffer), rings.kvAnswerBell.index)
      : undefined;
    this.jobs = new SpscRing(rings.jobs);
    this.done = new SpscRing(rings.done);
    this.kv = new SpscRing(rings.kv);
    this.answers = new SpscRing(rings.kvAnswers);
    this.pins = new Int32Array(rings.pins);
    this.arena = arena;
    this.copier = new GpuCopier(
      device,
      arena,
      {
        tier: new Uint32Array(rings.tierArena),
        pins: this.pins,
        wordsPerBlock: rings.wordsPerBlock,
        blocksPerChunk: rings.blocksPerChunk,
      },
      this.mapHold(),
    );
    this.kernels = kernels ? new BlockKernels(device, arena) : undefined;
    this.memory = rings.memory
      ? new MemorySampler(rings.memory.buffer, rings.memory.slot)
      : undefined;
  }

  async run(): Promise<GpuCopyReport> {
    Atomics.store(this.words, RING_READY, 1);
    Atomics.notify(this.words, RING_READY);
    while (Atomics.load(this.words, RING_STOP) === 0) {
      this.memory?.tick();
      const seen = this.bell.read();
      if (!this.step()) await this.bell.parkAsync(seen, PARK_MS_MAX);
    }
    return this.stop();
  }

  /** One turn; true when it did anything (the loop then turns again at once, after a yield). */
  private step(): boolean {
    let did = this.flush();
    if (Atomics.load(this.words, GPU_LOSE_DEVICE) === 1 && !this.lostOnRequest) {
      this.lostOnRequest = true;
      this.copier.markLost('GPU_LOSE_DEVICE (test switch)');
      this.device.destroy();
      did = true;
    }
    while (this.hasRoom() && this.jobs.pop((r) => this.hold(r))) did = true;
    if (this.drainKv() > 0) did = true;
    // Marks only grow, so the jobs whose writes are all read are a prefix.
    let ready = 0;
    while (ready < this.held.length && this.kv.consumedTo(this.held[ready]!.kvMark)) ready += 1;
    if (ready > 0) {
      for (const job of this.held.splice(0, ready)) this.start(job);
      did = true;
    }
    return did;
  }

  private hasRoom(): boolean {
    const queued = this.running + this.held.length;
    if (queued === 0) return true;
    return queued < GPU_JOBS_IN_FLIGHT_MAX && this.bytesInFlight < STAGING_BYTES_IN_FLIGHT_MAX;
  }

  private hold(r: Int32Array): void {
    const task = r.slice(1); // the ring's view is valid only during the pop
    const bytes = this.copier.taskBytes(task);
    this.bytesInFlight += bytes;
    this.held.push({ ticket: r[0]!, task, bytes, kvMark: this.kv.producedTo() });
  }

  private start(job: Job): void {
    this.running += 1;
    const load = job.task[0] === TASK_LOAD;
    this.copier.run(job.task).then(
      (bytes) => {
        if (load) {
          this.loadJobs += 1;
          this.bytesLoaded += bytes;
        } else {
          this.storeJobs += 1;
          this.bytesStored += bytes;
        }
        this.finish(job, true, bytes, '');
      },
      (err: unknown) => {
        this.jobsFailed += 1;
        // A map aborted by a lost device says only "AbortError": name the loss.
        const lost = this.copier.lostReason;
        const text = describe(err);
        this.finish(job, false, 0, lost && !text.includes(lost) ? `${text}; ${lost}` : text);
      },
    );
  }

  private finish(job: Job, ok: boolean, bytes: number, error: string): void {
    this.running -= 1;
    this.bytesInFlight -= job.bytes;
    const record = new Int32Array(COMPLETION_RECORD_WORDS_MAX);
    const n = encodeCompletion(record, job.ticket, ok, bytes, error);
    this.unsent.push(record.subarray(0, n));
    this.flush();
    // Room for more jobs, and the loop may be parked: wake it.
    this.bell.ring();
  }

  /** Publishes completions and answers that waited for ring room; true when any went out. */
  private flush(): boolean {
    let sent = 0;
    while (this.unsent.length > 0 && this.done.push(this.unsent[0]!)) {
      this.unsent.shift();
      sent += 1;
    }
    if (sent > 0) this.completionBell.ring();
    let answered = 0;
    while (this.unanswered.length > 0 && this.answers.push(this.unanswered[0]!)) {
      this.unanswered.shift();
      answered += 1;
    }
    if (answered > 0) this.answerBell?.ring();
    return sent + answered > 0;
  }

  /**
   * KV writes are queued as they are read; a check is queued and answered
   * when its read-back resolves. Stops at the per-turn bound, and while
   * answers wait for ring room (held jobs whose writes are behind wait too).
   * Returns the records handled.
   */
  private drainKv(): number {
    let handled = 0;
    while (handled < KV_RECORDS_PER_TURN_MAX && this.unanswered.length === 0) {
      if (!this.kv.pop((r) => this.kvRecord(r))) break;
      handled += 1;
    }
    return handled;
  }

  private kvRecord(r: Int32Array): void {
    const op = r[0];
    if (op === KV_WRITE) {
      const entries = decodeKvEntries(r, 2, r[1]!);
      this.blocksWritten += entries.length;
      if (this.kernels === undefined) {
        invariant(false, "KV writes go to an arena of kvoff's own (an engine writes its own KV)");
      }
      if (this.copier.lostReason !== undefined) return;
      void this.kernels.write(entries).then((refusal) => {
        if (refusal !== undefined) this.kvWritesRefused += entries.length;
      });
      return;
    }
    if (op !== KV_CHECK) throw new Error(`GPU thread: KV record op ${op} is unknown`);
    const tag = r[1]!;
    const entries = decodeKvEntries(r, 3, r[2]!);
    this.blocksChecked += entries.length;
    this.checksRunning += 1;
    const answer = (mismatchedBlocks: number) => {
      this.checksRunning -= 1;
      this.unanswered.push(Int32Array.of(tag, mismatchedBlocks));
      this.flush();
      this.bell.ring();
    };
    if (this.copier.lostReason !== undefined || this.kernels === undefined) {
      answer(-1);
      return;
    }
    this.kernels.check(entries).then(
      (words) => answer(words.reduce((n, w) => n + (w > 0 ? 1 : 0), 0)),
      () => answer(-1),
    );
  }

  private async stop(): Promise<GpuCopyReport> {
    // Jobs popped but not started, and jobs still in the ring: they fail
    // without a copy (a store releases its pins, as any failed copy does).
    let failedAtStop = 0;
    const abandon = (task: Int32Array, ticket: number) => {
      if (task[0] !== TASK_LOAD && taskUnpins(task)) unpinBlocks(this.pins, storeTaskBlocks(task));
      failedAtStop += 1;
      const record = new Int32Array(COMPLETION_RECORD_WORDS_MAX);
      const n = encodeCompletion(record, ticket, false, 0, 'GPU thread stopped before the copy');
      this.unsent.push(record.subarray(0, n));
    };
    for (const job of this.held) abandon(job.task, job.ticket);
    this.held = [];
    while (this.jobs.pop((r) => abandon(r.slice(1), r[0]!)));
    // Copies, checks, and the maps no task awaits: the thread must not end
    // with a map pending (Dawn aborts the process; see webgpu-copy.ts).
    const settled = () =>
      this.running === 0 && this.checksRunning === 0 && this.copier.mapsPending === 0;
    const deadline = performance.now() + STOP_WAIT_MS_MAX;
    while (!settled() && performance.now() < deadline) {
      this.flush();
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    this.flush();
    this.kernels?.destroy();
    this.copier.destroy();
    this.arena.destroy();
    // Past the deadline (a hung device), destroying the buffers rejects their
    // maps: give those callbacks their turn before the thread may end.
    const destroyedAtMs = performance.now();
    while (!settled() && performance.now() - destroyedAtMs < MAPS_AFTER_DESTROY_MS_MAX) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    return {
      storeJobs: this.storeJobs,
      loadJobs: this.loadJobs,
      jobsFailed: this.jobsFailed,
      bytesStored: this.bytesStored,
      bytesLoaded: this.bytesLoaded,
      blocksWritten: this.blocksWritten,
      blocksChecked: this.blocksChecked,
      kvWritesRefused: this.kvWritesRefused,
      jobsFailedAtStop: failedAtStop,
    };
  }

  /** Test-only: GPU_HOLD_MAPS makes a store wait after its map resolved (see MapHold). */
  private mapHold(): MapHold {
    const words = this.words;
    return {
      active: () => Atomics.load(words, GPU_HOLD_MAPS) === 1,
      held: () => {
        Atomics.add(words, GPU_MAPS_HELD, 1);
        Atomics.notify(words, GPU_MAPS_HELD);
      },
      release: async () => {
        const deadline = performance.now() + HOLD_WAIT_MS_MAX;
        while (Atomics.load(words, GPU_HOLD_MAPS) === 1 && performance.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
      },
    };
  }
}
