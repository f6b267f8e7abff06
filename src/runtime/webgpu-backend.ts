// The WebGPU transfer backend: the KV arena lives in GPU buffers on the GPU
// thread (src/runtime/webgpu-thread.ts), which owns the device; the store
// role submits its copy tasks to that thread through a job ring and collects
// completions from a completion ring that rings its doorbell, exactly as it
// does with the shared-memory backend's threads (the same RingClient). No
// thread but the GPU thread touches the device, and nothing waits on a map
// but that thread's event loop.
//
// GpuThread starts and stops the thread (whoever owns it: the backend itself,
// or a runtime that also gives the engine the thread's KV ring).
import { WebGpuUnavailableError } from '../errors.js';
import type { TransferBackend, TransferCompletion } from './backend-types.js';
import { Doorbell } from './doorbell.js';
import { RingClient, createRingThreadBuffers } from './ring-client.js';
import { RING_BELL, RING_STOP } from './transfer.js';
import type { TransferArenas } from './transfer.js';
import type { OpenDeviceOptions, WebGpuAdapterInfo } from './webgpu-device.js';
import { GPU_JOBS_IN_FLIGHT_MAX, GPU_WORDS_BYTES } from './webgpu-loop.js';
import type { GpuCopyReport, GpuRings } from './webgpu-loop.js';
import type { GpuThreadMessage, GpuThreadSpec } from './webgpu-thread.js';
import { createKvRingBuffers } from './webgpu-kv.js';
import { spawnWorker, workerUrl } from './worker-files.js';
import type { Worker } from 'node:worker_threads';

/** Longest the GPU thread may take to open its device (llvmpipe compiles its kernels on first use). */
const READY_WAIT_MS_MAX = 60_000;
/** Longest close() waits for the thread to finish its copies and report. */
const CLOSE_WAIT_MS_MAX = 35_000;

export interface GpuThreadSpecOptions {
  /** The store's doorbell, rung after completions are published. */
  completionBell?: Doorbell;
  /** Largest task in words (from the config); sizes the job ring. */
  taskWordsMax?: number;
  /** Where the GPU thread samples its own heap (the runtime's memory words). */
  memory?: { buffer: SharedArrayBuffer; slot: number };
  /** The engine's doorbell, rung after a KV check's answer is published. */
  kvAnswerBell?: Doorbell;
  /** Dawn's package and options (tests name a missing one). */
  device?: OpenDeviceOptions;
}

/** The rings and words of a GPU thread over `arenas` (its GPU arena is the same number of blocks, on the device). */
export function createGpuThreadSpec(
  arenas: TransferArenas,
  options: GpuThreadSpecOptions = {},
): GpuThreadSpec {
  const bell = options.completionBell ?? new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
  const bytesPerBlock = arenas.wordsPerBlock * 4;
  return {
    ...createRingThreadBuffers(options.taskWordsMax, GPU_WORDS_BYTES),
    ...createKvRingBuffers(),
    completionBell: bell.words.buffer as SharedArrayBuffer,
    completionBellIndex: bell.index,
    tierArena: arenas.tierArena,
    pins: arenas.pins,
    gpuBlocks: Math.floor(arenas.gpuArena.byteLength / bytesPerBlock),
    wordsPerBlock: arenas.wordsPerBlock,
    blocksPerChunk: arenas.blocksPerChunk,
    ...(options.memory ? { memory: options.memory } : {}),
    ...(options.kvAnswerBell
      ? {
          kvAnswerBell: {
            buffer: options.kvAnswerBell.words.buffer as SharedArrayBuffer,
            index: options.kvAnswerBell.index,
          },
        }
      : {}),
    ...(options.device ? { device: options.device } : {}),
  };
}

/**
 * The GPU thread, started: resolves once its device is open (rejects with
 * WebGpuUnavailableError naming what is missing, or the error that ended the
 * thread). `failed` is called if the thread dies later.
 */
export class GpuThread {
  readonly spec: GpuThreadSpec;
  readonly adapter: WebGpuAdapterInfo;
  private readonly worker: Worker;
  /** Settles when the thread reported, exited or failed: what close() waits for. */
  private readonly ended: Promise<void>;
  private endedResolve!: () => void;
  private report: GpuCopyReport | undefined;
  private failure: unknown;
  private readonly onFailure = new Set<(cause: unknown) => void>();
  private closing: Promise<GpuCopyReport | undefined> | undefined;

  private constructor(spec: GpuThreadSpec, worker: Worker, adapter: WebGpuAdapterInfo) {
    this.spec = spec;
    this.worker = worker;
    this.adapter = adapter;
    this.ended = new Promise<void>((resolve) => (this.endedResolve = resolve));
    worker.on('message', (m: GpuThreadMessage) => {
      if (m.type !== 'final') return;
      this.report = m.report;
      this.endedResolve();
    });
    worker.on('error', (err) => this.fail(err));
    worker.on('exit', (code) => {
      if (this.closing === undefined) this.fail(new Error(`GPU thread exited with code ${code}`));
      this.endedResolve();
    });
  }

  static async start(spec: GpuThreadSpec): Promise<GpuThread> {
    const worker = spawnWorker(workerUrl('gpu'), { workerData: spec, name: 'kvoff-gpu' });
    let timer: NodeJS.Timeout | undefined;
    let onMessage: ((m: GpuThreadMessage) => void) | undefined;
    let onError: ((err: Error) => void) | undefined;
    let onExit: ((code: number) => void) | undefined;
    try {
      const adapter = await new Promise<WebGpuAdapterInfo>((resolve, reject) => {
        timer = setTimeout(
          () =>
            reject(new Error(`GPU thread did not open its device within ${READY_WAIT_MS_MAX} ms`)),
          READY_WAIT_MS_MAX,
        );
        onMessage = (m) => {
          if (m.type === 'ready') resolve(m.adapter);
          else if (m.type === 'unavailable')
            reject(new WebGpuUnavailableError(m.missing, m.detail));
        };
        onError = reject;
        onExit = (code) =>
          reject(new Error(`GPU thread exited with code ${code} before its device opened`));
        worker.on('message', onMessage);
        worker.on('error', onError);
        worker.on('exit', onExit);
      });
      return new GpuThread(spec, worker, adapter);
    } catch (err) {
      await worker.terminate();
      throw err;
    } finally {
      clearTimeout(timer);
      if (onMessage) worker.off('message', onMessage);
      if (onError) worker.off('error', onError);
      if (onExit) worker.off('exit', onExit);
    }
  }

  /** Why the thread died, if it did. */
  get failedWith(): unknown {
    return this.failure;
  }

  /** Calls `fn` once if the thread dies (at once if it already has). */
  whenFailed(fn: (cause: unknown) => void): void {
    if (this.failure !== undefined) fn(this.failure);
    else this.onFailure.add(fn);
  }

  /**
   * Raises the stop flag: the thread fails what is still queued (releasing
   * pins), lets copies in flight finish (bounded), destroys its device and
   * reports; then the worker is ended. Resolves with the report (undefined if
   * the thread gave none in time).
   */
  close(): Promise<GpuCopyReport | undefined> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<GpuCopyReport | undefined> {
    const words = new Int32Array(this.spec.words);
    Atomics.store(words, RING_STOP, 1);
    Atomics.add(words, RING_BELL, 1);
    Atomics.notify(words, RING_BELL);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.ended,
      new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_MS_MAX))),
    ]).finally(() => clearTimeout(timer));
    // Dawn's handle can keep an idle worker's event loop alive: end it.
    await this.worker.terminate();
    return this.report;
  }

  private fail(cause: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = cause;
    for (const fn of this.onFailure) fn(cause);
    this.onFailure.clear();
    this.endedResolve();
  }
}

/**
 * The store side: submits to the GPU thread's job ring and collects its
 * completion ring. Owns the thread when it started it (start()), so close()
 * ends it; otherwise the runtime does.
 */
export class WebGpuTransferBackend implements TransferBackend {
  readonly name = 'webgpu';
  /** The device's adapter when kvoff opened it; undefined when an engine serves its own device. */
  readonly adapter: WebGpuAdapterInfo | undefined;
  /** The GPU thread, when this backend started it and ends it on close(). */
  readonly thread: GpuThread | undefined;
  private readonly client: RingClient;

  private constructor(rings: GpuRings, adapter?: WebGpuAdapterInfo, thread?: GpuThread) {
    this.client = new RingClient([rings]);
    this.adapter = adapter;
    this.thread = thread;
  }

  /** Starts a GPU thread over `arenas` and a backend that owns it (close() ends it). */
  static async start(
    arenas: TransferArenas,
    options: GpuThreadSpecOptions = {},
  ): Promise<WebGpuTransferBackend> {
    const thread = await GpuThread.start(createGpuThreadSpec(arenas, options));
    return WebGpuTransferBackend.forThread(thread, true);
  }

  /** A backend over a running GPU thread; `owns`: close() ends the thread. */
  static forThread(thread: GpuThread, owns: boolean): WebGpuTransferBackend {
    const backend = new WebGpuTransferBackend(
      thread.spec,
      thread.adapter,
      owns ? thread : undefined,
    );
    // The thread died: what is in flight fails, and the store's next collection sees it.
    const bell = new Doorbell(
      new Int32Array(thread.spec.completionBell),
      thread.spec.completionBellIndex,
    );
    thread.whenFailed((cause) => {
      backend.client.failAll(cause);
      bell.ring();
    });
    return backend;
  }

  /**
   * A backend over rings that another thread serves (an engine's own device,
   * through WebGpuCopyServer): submits and collects only.
   */
  static attach(rings: GpuRings, adapter?: WebGpuAdapterInfo): WebGpuTransferBackend {
    return new WebGpuTransferBackend(rings, adapter);
  }

  get inFlight(): number {
    return this.client.inFlight;
  }

  /** The jobs the GPU thread keeps in flight at once (it pipelines copies on the device). */
  get capacity(): number {
    return GPU_JOBS_IN_FLIGHT_MAX;
  }

  submit(task: Int32Array): void {
    this.client.submit(task);
  }

  takeCompletions(): TransferCompletion[] {
    return this.client.takeCompletions();
  }

  async close(): Promise<void> {
    await this.thread?.close();
  }
}
