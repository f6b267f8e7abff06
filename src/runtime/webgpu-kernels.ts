// The engine's KV, computed on the GPU: a WGSL kernel writes each block's
// verifiable bytes (src/bytes.ts's expansion of its chunk's key and its
// position) into the arena, and a second one checks blocks against the same
// expansion (what a load brought back). The expansion is mulberry32, whose
// state only ever adds a constant, so word i of a block is a pure function of
// the seed and i: every word is one invocation.
//
// A dispatch covers the entries of one arena buffer: y is the entry, x strides
// over the block's words (so a block of any size fits the 65,535-workgroup
// limit).
import type { GpuArena } from './webgpu-arena.js';
import {
  GPU_BUFFER_USAGE,
  GPU_MAP_MODE,
  GPU_SHADER_STAGE_COMPUTE,
  openErrorScope,
} from './webgpu-device.js';

const WORKGROUP = 64;
const WORKGROUPS_X_MAX = 1024;
/** Entries per dispatch at most (the y dimension's limit). */
const ENTRIES_PER_DISPATCH_MAX = 65_535;
/** Words per entry: block (within its buffer), seed, two unused. */
const KV_ENTRY_WORDS = 4;

const SHADER = /* wgsl */ `
struct Params { wordsPerBlock: u32, count: u32, strideX: u32, pad: u32 }
@group(0) @binding(0) var<storage, read_write> arena: array<u32>;
@group(0) @binding(1) var<storage, read> entries: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> params: Params;
@group(0) @binding(3) var<storage, read_write> mismatches: array<atomic<u32>>;

// src/bytes.ts's next(), with u32 wrapping as Math.imul does, from the seed
// the host computed (blockSeed: the key's 256 bits and the position).
fn seedOf(e: vec4<u32>) -> u32 {
  return e.y;
}
fn word(s0: u32, i: u32) -> u32 {
  let s = s0 + (i + 1u) * 0x6d2b79f5u;
  var t = (s ^ (s >> 15u)) * (s | 1u);
  t = t ^ (t + (t ^ (t >> 7u)) * (t | 61u));
  return t ^ (t >> 14u);
}

@compute @workgroup_size(${WORKGROUP})
fn expand(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.y >= params.count) { return; }
  let e = entries[id.y];
  let s0 = seedOf(e);
  let base = e.x * params.wordsPerBlock;
  for (var i = id.x; i < params.wordsPerBlock; i += params.strideX) {
    arena[base + i] = word(s0, i);
  }
}

@compute @workgroup_size(${WORKGROUP})
fn check(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.y >= params.count) { return; }
  let e = entries[id.y];
  let s0 = seedOf(e);
  let base = e.x * params.wordsPerBlock;
  var bad = 0u;
  for (var i = id.x; i < params.wordsPerBlock; i += params.strideX) {
    if (arena[base + i] != word(s0, i)) { bad += 1u; }
  }
  if (bad > 0u) { atomicAdd(&mismatches[id.y], bad); }
}
`;

/** One block to write or check: its arena block ID, its chunk's key and its position in the chunk. */
/** One block for a kernel: its arena block ID and its bytes' seed (blockSeed of its key and position). */
export interface SeededBlock {
  readonly block: number;
  readonly seed: number;
}

export interface KvEntry {
  readonly block: number;
  readonly key: bigint;
  readonly position: number;
}

export class BlockKernels {
  private readonly device: GPUDevice;
  private readonly arena: GpuArena;
  private readonly layout: GPUBindGroupLayout;
  private readonly expandPipeline: GPUComputePipeline;
  private readonly checkPipeline: GPUComputePipeline;
  private readonly params: GPUBuffer;
  private entries: GPUBuffer;
  private readonly dummy: GPUBuffer;
  private readonly xGroups: number;

  constructor(device: GPUDevice, arena: GpuArena) {
    this.device = device;
    this.arena = arena;
    const module = device.createShaderModule({ code: SHADER });
    const layout = device.createBindGroupLayout({
      entries: [0, 1, 2, 3].map((binding) => ({
        binding,
        visibility: GPU_SHADER_STAGE_COMPUTE,
        buffer: {
          type: binding === 2 ? 'uniform' : binding === 1 ? 'read-only-storage' : 'storage',
        },
      })),
    });
    this.layout = layout;
    const pipelineLayout = device.createPipelineLayout({ bindGroupLayouts: [layout] });
    this.expandPipeline = device.createComputePipeline({
      layout: pipelineLayout,
      compute: { module, entryPoint: 'expand' },
    });
    this.checkPipeline = device.createComputePipeline({
      layout: pipelineLayout,
      compute: { module, entryPoint: 'check' },
    });
    const u = GPU_BUFFER_USAGE;
    this.params = device.createBuffer({ size: 16, usage: u.UNIFORM | u.COPY_DST });
    this.entries = device.createBuffer({ size: 4096, usage: u.STORAGE | u.COPY_DST });
    this.dummy = device.createBuffer({ size: 16, usage: u.STORAGE });
    const words = arena.bytesPerBlock / 4;
    this.xGroups = Math.min(WORKGROUPS_X_MAX, Math.ceil(words / WORKGROUP));
  }

  /**
   * Queues the expansion of every entry into its block (one dispatch per
   * arena buffer touched); resolves with the device's refusal, if it refused
   * (the blocks then hold whatever they held, which a verify would find).
   */
  write(entries: readonly SeededBlock[]): Promise<string | undefined> {
    const scope = openErrorScope(this.device);
    try {
      for (const part of this.byBuffer(entries)) this.dispatch('expand', part.buffer, part.words);
    } finally {
      void scope.close();
    }
    return scope.close();
  }

  /**
   * Queues a check of every entry's block against its expansion; resolves
   * with the mismatching words of each entry, in order (all 0: the GPU holds
   * exactly those bytes).
   */
  async check(entries: readonly SeededBlock[]): Promise<Uint32Array> {
    const out = new Uint32Array(entries.length);
    const parts = this.byBuffer(entries);
    const u = GPU_BUFFER_USAGE;
    const scope = openErrorScope(this.device);
    const reads: {
      part: (typeof parts)[number];
      counts: GPUBuffer;
      staging: GPUBuffer;
      bytes: number;
    }[] = [];
    try {
      for (const part of parts) {
        const bytes = Math.max(16, part.indexes.length * 4);
        const counts = this.device.createBuffer({
          size: bytes,
          usage: u.STORAGE | u.COPY_SRC | u.COPY_DST,
        });
        const staging = this.device.createBuffer({ size: bytes, usage: u.MAP_READ | u.COPY_DST });
        reads.push({ part, counts, staging, bytes });
        this.dispatch('check', part.buffer, part.words, counts, staging, bytes);
      }
    } finally {
      void scope.close();
    }
    try {
      const refusal = await scope.close();
      if (refusal !== undefined) throw new Error(`KV check refused: ${refusal}`);
      for (const r of reads) {
        await r.staging.mapAsync(GPU_MAP_MODE.READ, 0, r.bytes);
        const got = new Uint32Array(r.staging.getMappedRange(0, r.bytes));
        r.part.indexes.forEach((index, i) => (out[index] = got[i]!));
        r.staging.unmap();
      }
    } finally {
      for (const r of reads) {
        r.counts.destroy();
        r.staging.destroy();
      }
    }
    return out;
  }

  destroy(): void {
    this.params.destroy();
    this.entries.destroy();
    this.dummy.destroy();
  }

  /** Entries grouped by arena buffer and cut to dispatch size, each as the kernel's words. */
  private byBuffer(
    entries: readonly SeededBlock[],
  ): { buffer: number; words: Uint32Array; indexes: number[] }[] {
    const groups = new Map<number, number[]>();
    entries.forEach((e, i) => {
      const b = this.arena.bufferOf(e.block);
      let g = groups.get(b);
      if (g === undefined) groups.set(b, (g = []));
      g.push(i);
    });
    const parts: { buffer: number; words: Uint32Array; indexes: number[] }[] = [];
    for (const [buffer, all] of groups) {
      for (let from = 0; from < all.length; from += ENTRIES_PER_DISPATCH_MAX) {
        const indexes = all.slice(from, from + ENTRIES_PER_DISPATCH_MAX);
        const words = new Uint32Array(indexes.length * KV_ENTRY_WORDS);
        indexes.forEach((index, i) => {
          const e = entries[index]!;
          words[i * 4] = this.arena.indexInBuffer(e.block);
          words[i * 4 + 1] = e.seed >>> 0;
        });
        parts.push({ buffer, words, indexes });
      }
    }
    return parts;
  }

  /**
   * One dispatch, submitted on its own: the entries and params buffers are
   * rewritten by the next call's writeBuffer, which the queue orders after
   * this submission.
   */
  private dispatch(
    kernel: 'expand' | 'check',
    buffer: number,
    words: Uint32Array,
    counts?: GPUBuffer,
    staging?: GPUBuffer,
    countBytes = 0,
  ): void {
    const count = words.length / KV_ENTRY_WORDS;
    if (count === 0) return;
    const u = GPU_BUFFER_USAGE;
    if (this.entries.size < words.byteLength) {
      this.entries.destroy();
      this.entries = this.device.createBuffer({
        size: nextPowerOfTwo(words.byteLength),
        usage: u.STORAGE | u.COPY_DST,
      });
    }
    const queue = this.device.queue;
    queue.writeBuffer(this.entries, 0, words);
    queue.writeBuffer(
      this.params,
      0,
      Uint32Array.of(this.arena.bytesPerBlock / 4, count, this.xGroups * WORKGROUP, 0),
    );
    const pipeline = kernel === 'expand' ? this.expandPipeline : this.checkPipeline;
    const bind = this.device.createBindGroup({
      layout: this.layout,
      entries: [
        { binding: 0, resource: { buffer: this.arena.buffers[buffer]! } },
        { binding: 1, resource: { buffer: this.entries, size: words.byteLength } },
        { binding: 2, resource: { buffer: this.params } },
        { binding: 3, resource: { buffer: counts ?? this.dummy } },
      ],
    });
    const encoder = this.device.createCommandEncoder();
    if (counts) encoder.clearBuffer(counts);
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(this.xGroups, count);
    pass.end();
    if (counts && staging) encoder.copyBufferToBuffer(counts, 0, staging, 0, countBytes);
    queue.submit([encoder.finish()]);
  }
}

function nextPowerOfTwo(n: number): number {
  let p = 4096;
  while (p < n) p *= 2;
  return p;
}
