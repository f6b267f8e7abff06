// The GPU thread: owns the WebGPU device, the KV arena in GPU buffers, and the
// copies between it and the host tier. No logic here: see
// src/runtime/webgpu-thread.ts.
import { parentPort, workerData } from 'node:worker_threads';
import { runGpuThread } from '../src/runtime/webgpu-thread.js';
import type { GpuThreadSpec } from '../src/runtime/webgpu-thread.js';

await runGpuThread(workerData as GpuThreadSpec, (m) => parentPort!.postMessage(m));
