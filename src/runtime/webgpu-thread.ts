// The GPU thread: kvoff's own thread for the WebGPU device (a device belongs
// to the thread that opened it). It opens the device, makes the KV arena in
// GPU buffers and serves the rings with a GpuCopyLoop (the store's copy jobs,
// the simulated engine's KV writes and checks) until it is stopped.
import { WebGpuUnavailableError } from '../errors.js';
import type { WebGpuMissing } from '../errors.js';
import { GpuArena } from './webgpu-arena.js';
import { openWebGpuDevice } from './webgpu-device.js';
import type { OpenDeviceOptions, OpenedDevice, WebGpuAdapterInfo } from './webgpu-device.js';
import { GpuCopyLoop } from './webgpu-loop.js';
import type { GpuCopyReport, GpuRings } from './webgpu-loop.js';

/** Longest the thread waits, after destroying its device, for Dawn to settle what it owed. */
const DESTROY_SETTLE_MS_MAX = 1000;

/** What the GPU thread is started with (structured-cloned: the buffers are shared). */
export interface GpuThreadSpec extends GpuRings {
  readonly device?: OpenDeviceOptions;
}

export type GpuThreadMessage =
  | { readonly type: 'ready'; readonly adapter: WebGpuAdapterInfo }
  | { readonly type: 'unavailable'; readonly missing: WebGpuMissing; readonly detail: string }
  | { readonly type: 'final'; readonly report: GpuCopyReport };

/** The GPU thread's whole life: open the device, serve the rings until stopped, report. */
export async function runGpuThread(
  spec: GpuThreadSpec,
  post: (m: GpuThreadMessage) => void,
): Promise<void> {
  let opened: OpenedDevice;
  try {
    opened = await openWebGpuDevice(spec.device);
  } catch (err) {
    if (!(err instanceof WebGpuUnavailableError)) throw err;
    post({ type: 'unavailable', missing: err.missing, detail: err.message });
    return;
  }
  const arena = GpuArena.create(opened.device, {
    blocks: spec.gpuBlocks,
    bytesPerBlock: spec.wordsPerBlock * 4,
  });
  const loop = new GpuCopyLoop(spec, opened.device, arena, true);
  post({ type: 'ready', adapter: opened.adapter });
  const report = await loop.run();
  // Used after the loop on purpose: `opened` holds Dawn's instance (opened.gpu) alive until here.
  opened.device.destroy();
  // Dawn settles what the destroyed device still owed (its lost promise, the
  // callbacks it rejects) on this thread's event loop, and the main thread
  // ends this worker as soon as it has the report: Dawn calling into a worker
  // being terminated aborts the process ("FATAL ERROR:
  // Error::ThrowAsJavaScriptException napi_throw", 1 of 12 fixture processes
  // closing backends at load). Let those run first, bounded.
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    opened.device.lost,
    new Promise((resolve) => (timer = setTimeout(resolve, DESTROY_SETTLE_MS_MAX))),
  ]).finally(() => clearTimeout(timer));
  await new Promise((resolve) => setTimeout(resolve, 1));
  post({ type: 'final', report });
}
