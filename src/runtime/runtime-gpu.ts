// The runtime's WebGPU device (RuntimeOptions.transferBackend 'webgpu'): the
// GPU thread's rings, laid out by main and handed to the roles that use
// them, and, with the built-in engine, the GPU thread itself, started by main
// before any role. The store submits copies to it (WebGpuTransferBackend over
// the rings), the simulated engine writes and checks its KV through it
// (GpuEngineKv); with an external engine the host serves the same rings on
// its own device's thread (WebGpuCopyServer.serve).
import type { Config } from '../config.js';
import type { RuntimeViews } from './buffers.js';
import { transferMemorySlot } from './memory.js';
import { transferTaskWordsMax } from './transfer.js';
import { GpuThread, createGpuThreadSpec } from './webgpu-backend.js';
import type { WebGpuAdapterInfo } from './webgpu-device.js';
import type { GpuRings } from './webgpu-loop.js';
import type { GpuThreadSpec } from './webgpu-thread.js';

export type TransferBackendName = 'shared-memory' | 'webgpu';
export const TRANSFER_BACKENDS: readonly TransferBackendName[] = ['shared-memory', 'webgpu'];

export class RuntimeGpu {
  /** The rings the store and the engine's side use (structured-cloned into their workers). */
  readonly rings: GpuThreadSpec;
  /** kvoff's GPU thread; undefined when an external engine serves the rings on its own device. */
  readonly thread: GpuThread | undefined;

  private constructor(rings: GpuThreadSpec, thread: GpuThread | undefined) {
    this.rings = rings;
    this.thread = thread;
  }

  /**
   * Lays out the rings; with `ownDevice`, starts the GPU thread over them
   * (rejects with WebGpuUnavailableError when the package or an adapter is
   * missing). `failed` is called if the thread dies later.
   */
  static async open(
    config: Config,
    views: RuntimeViews,
    memory: SharedArrayBuffer,
    ownDevice: boolean,
    failed: (cause: unknown) => void,
  ): Promise<RuntimeGpu> {
    const rings = createGpuThreadSpec(views.transferArenas(), {
      // Completions ring the store's bell, answers the engine's, as the roles' own rings do.
      completionBell: views.doorbell('store'),
      kvAnswerBell: views.doorbell('scheduler'),
      taskWordsMax: transferTaskWordsMax(config),
      // The GPU thread stands where the first copy thread would: its heap is sampled there.
      memory: { buffer: memory, slot: transferMemorySlot(0) },
    });
    if (!ownDevice) return new RuntimeGpu(rings, undefined);
    const thread = await GpuThread.start(rings);
    thread.whenFailed(failed);
    return new RuntimeGpu(rings, thread);
  }

  /** The adapter of kvoff's own device (undefined when the engine serves its own). */
  get adapter(): WebGpuAdapterInfo | undefined {
    return this.thread?.adapter;
  }

  /** What an external engine's thread serves (WebGpuCopyServer.serve). */
  get servedRings(): GpuRings {
    return this.rings;
  }

  /** Ends the GPU thread (bounded); after the store stopped, so no copy is still asked for. */
  async close(): Promise<void> {
    await this.thread?.close();
  }
}
