// Opening a WebGPU device in Node through the optional npm package `webgpu`
// (Dawn's Node bindings). Only the GPU thread calls this, and only when the
// WebGPU backend was chosen: nothing else in kvoff imports the package, so an
// install without it runs every other backend. What is missing (the package,
// an adapter, a device) is a WebGpuUnavailableError naming it and the driver.
//
// Two facts of Dawn in Node shape the callers: it refuses views over a
// SharedArrayBuffer (queue.writeBuffer on one crashes the process), so host
// bytes cross through mapped buffers or private copies; and a device belongs
// to the thread that opened it.
import type { create as createGpu } from 'webgpu';
import { WebGpuUnavailableError } from '../errors.js';

/** The package kvoff loads Dawn from. */
const WEBGPU_PACKAGE = 'webgpu';

/** What the adapter says about itself (GPUAdapterInfo's strings). */
export interface WebGpuAdapterInfo {
  /** A one-line name: the description, or vendor and device. */
  readonly name: string;
  readonly vendor: string;
  readonly architecture: string;
  readonly device: string;
  readonly description: string;
}

/**
 * The WebGPU flag values kvoff uses. They are fixed by the WebGPU
 * specification, so a device from any implementation (an engine's own) takes
 * them; kvoff never puts the package's globals on globalThis.
 */
export const GPU_BUFFER_USAGE = {
  MAP_READ: 0x1,
  MAP_WRITE: 0x2,
  COPY_SRC: 0x4,
  COPY_DST: 0x8,
  UNIFORM: 0x40,
  STORAGE: 0x80,
} as const;
export const GPU_MAP_MODE = { READ: 0x1, WRITE: 0x2 } as const;
export const GPU_SHADER_STAGE_COMPUTE = 0x4;

export interface OpenedDevice {
  /**
   * Dawn's instance. Held as long as the device is used: once nothing
   * references it, V8 collects it and Dawn frees the instance its event
   * processing still runs on (a crash in ProcessEvents a few jobs later).
   */
  readonly gpu: GPU;
  readonly device: GPUDevice;
  readonly adapter: WebGpuAdapterInfo;
}

export interface OpenDeviceOptions {
  /** Where to import Dawn from; WEBGPU_PACKAGE by default. */
  readonly packageName?: string;
  /** Options for Dawn's create() (e.g. 'adapter=NAME', 'backend=vulkan'). */
  readonly dawnOptions?: readonly string[];
}

interface WebGpuModule {
  readonly create: typeof createGpu;
}

/**
 * Imports Dawn, asks for an adapter and a device with the adapter's largest
 * buffer limits (the arena is split into buffers no larger than a storage
 * binding). Rejects with WebGpuUnavailableError when any of them is missing.
 */
export async function openWebGpuDevice(options: OpenDeviceOptions = {}): Promise<OpenedDevice> {
  const name = options.packageName ?? WEBGPU_PACKAGE;
  let mod: WebGpuModule;
  try {
    mod = (await import(name)) as WebGpuModule;
  } catch (err) {
    throw new WebGpuUnavailableError('package', `import("${name}") failed: ${describe(err)}`);
  }
  const gpu = mod.create([...(options.dawnOptions ?? [])]);
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter();
  } catch (err) {
    throw new WebGpuUnavailableError('adapter', `requestAdapter() failed: ${describe(err)}`);
  }
  if (adapter === null) {
    throw new WebGpuUnavailableError('adapter', 'requestAdapter() found none');
  }
  const info = adapterInfo(adapter);
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice({
      requiredLimits: {
        maxBufferSize: adapter.limits.maxBufferSize,
        maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      },
    });
  } catch (err) {
    throw new WebGpuUnavailableError('device', `${info.name}: ${describe(err)}`);
  }
  return { gpu, device, adapter: info };
}

function adapterInfo(adapter: GPUAdapter): WebGpuAdapterInfo {
  const i = adapter.info;
  const vendor = i.vendor ?? '';
  const device = i.device ?? '';
  const description = (i.description ?? '').trim();
  const name = description || [vendor, device].filter(Boolean).join(' ') || 'unnamed adapter';
  return { name, vendor, architecture: i.architecture ?? '', device, description };
}

/**
 * Captures what the device refuses between open and close (validation, out
 * of memory), which WebGPU otherwise only reports to the console: a refused
 * copy must fail its job, not complete with stale bytes. close() is
 * idempotent and resolves with the first refusal's message, if any.
 */
export function openErrorScope(device: GPUDevice): { close(): Promise<string | undefined> } {
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  let closed: Promise<string | undefined> | undefined;
  return {
    close() {
      closed ??= Promise.all([device.popErrorScope(), device.popErrorScope()]).then(
        ([validation, memory]) => (validation ?? memory)?.message,
        (err: unknown) => `error scope lost: ${describe(err)}`,
      );
      return closed;
    },
  };
}

export function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  if (err.name === 'Error') return err.message;
  return err.message ? `${err.name}: ${err.message}` : err.name;
}
