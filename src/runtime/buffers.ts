// All shared memory of one runtime, created once by main and attached by every
// thread: the request state (src/state.ts), the two byte arenas, doorbells,
// rings, counters and the control line. A plain object of SharedArrayBuffers,
// so it crosses postMessage/workerData without copies.
import type { Config } from '../config.js';
import { InvalidArgumentError } from '../errors.js';
import { LINE_WORDS, bufferSizes } from '../layout.js';
import type { SharedBuffers } from '../layout.js';
import { SharedState } from '../state.js';
import type { ArenaGeometry } from '../copy.js';
import type { TransferArenas } from './transfer.js';
import { Doorbell } from './doorbell.js';
import {
  CONTROL_BUFFER_BYTES,
  DOORBELL_BUFFER_BYTES,
  RINGS,
  STATS_BUFFER_BYTES,
  doorbellWord,
} from './thread-words.js';
import type { DoorbellName, RingName } from './thread-words.js';
import { SpscRing, ringBufferBytes } from './rings.js';
import { TIER_STATS_BYTES } from '../tier/tier-stats.js';
import { MEMORY_BUFFER_BYTES } from './memory.js';
import { eventRingWords } from '../events/queue.js';

export interface RuntimeBuffers {
  readonly state: SharedBuffers;
  /** gpuBlocks x bytesPerBlock: block b's KV bytes. */
  readonly gpuArena: SharedArrayBuffer;
  /** tierChunks x blocksPerChunk x bytesPerBlock: the host tier's slots. */
  readonly tierArena: SharedArrayBuffer;
  readonly doorbells: SharedArrayBuffer;
  readonly stats: SharedArrayBuffer;
  readonly control: SharedArrayBuffer;
  /** Per-level counters (host, disk, redis), written by the store thread. */
  readonly tierStats: SharedArrayBuffer;
  /** Each worker's heap and external memory, written by that worker (memory.ts). */
  readonly memory: SharedArrayBuffer;
  readonly rings: Readonly<Record<RingName, SharedArrayBuffer>>;
  /** The KV-event queue from the store thread to main (src/events/queue.ts); only with events on. */
  readonly events?: SharedArrayBuffer;
}

/**
 * `ringWords` overrides ring capacities (a power of two of at least 64 words):
 * the fuzzer uses small rings so that a full ring is a schedule it can reach.
 */
export function createRuntimeBuffers(
  config: Config,
  ringWords: Partial<Record<RingName, number>> = {},
  options: { events?: boolean } = {},
): RuntimeBuffers {
  const state = SharedState.create(config);
  const rings = {} as Record<RingName, SharedArrayBuffer>;
  for (const name of Object.keys(RINGS) as RingName[]) {
    rings[name] = new SharedArrayBuffer(ringBufferBytes(ringWords[name] ?? RINGS[name].words));
  }
  return {
    state: state.buffers,
    gpuArena: new SharedArrayBuffer(config.gpuBlocks * config.bytesPerBlock),
    tierArena: new SharedArrayBuffer(
      config.tierChunks * config.blocksPerChunk * config.bytesPerBlock,
    ),
    doorbells: new SharedArrayBuffer(DOORBELL_BUFFER_BYTES),
    stats: new SharedArrayBuffer(STATS_BUFFER_BYTES),
    control: new SharedArrayBuffer(CONTROL_BUFFER_BYTES),
    tierStats: new SharedArrayBuffer(TIER_STATS_BYTES),
    memory: new SharedArrayBuffer(MEMORY_BUFFER_BYTES),
    rings,
    ...(options.events
      ? { events: new SharedArrayBuffer(ringBufferBytes(eventRingWords(config))) }
      : {}),
  };
}

/** Typed views over RuntimeBuffers; cheap, one per thread. */
export class RuntimeViews {
  readonly config: Config;
  readonly buffers: RuntimeBuffers;
  readonly state: SharedState;
  readonly gpu: Uint32Array;
  readonly tier: Uint32Array;
  readonly geometry: ArenaGeometry;
  readonly stats: BigInt64Array;
  readonly control: Int32Array;
  readonly tierStats: BigInt64Array;
  readonly memory: BigInt64Array;
  private readonly bellWords: Int32Array;

  constructor(config: Config, buffers: RuntimeBuffers) {
    this.config = config;
    this.buffers = buffers;
    this.state = SharedState.attach(config, buffers.state);
    this.gpu = new Uint32Array(buffers.gpuArena);
    this.tier = new Uint32Array(buffers.tierArena);
    this.geometry = {
      wordsPerBlock: config.bytesPerBlock / 4,
      blocksPerChunk: config.blocksPerChunk,
    };
    this.stats = new BigInt64Array(buffers.stats);
    this.control = new Int32Array(buffers.control);
    this.tierStats = new BigInt64Array(buffers.tierStats);
    this.memory = new BigInt64Array(buffers.memory);
    this.bellWords = new Int32Array(buffers.doorbells);
  }
  /** What a transfer backend attaches to: both arenas, the pin counts and the copy geometry. */
  transferArenas(): TransferArenas {
    return {
      gpuArena: this.buffers.gpuArena,
      tierArena: this.buffers.tierArena,
      pins: this.buffers.state.pins,
      wordsPerBlock: this.geometry.wordsPerBlock,
      blocksPerChunk: this.geometry.blocksPerChunk,
    };
  }

  doorbell(name: DoorbellName): Doorbell {
    return new Doorbell(this.bellWords, doorbellWord(name));
  }

  ring(name: RingName): SpscRing {
    return new SpscRing(this.buffers.rings[name]);
  }
}

/**
 * Checks buffers handed in from outside (attachExternal in a host worker)
 * against `config` before any view is made over them: each must be a
 * SharedArrayBuffer of the size the runtime laid out. A wrong one made writes
 * vanish (a typed array drops out-of-range writes; an ArrayBuffer is a
 * private copy the store never sees) or threw a RangeError much later.
 * Throws InvalidArgumentError naming the buffer; attaches nothing.
 */
export function checkRuntimeBuffers(config: Config, buffers: RuntimeBuffers): void {
  if (
    typeof config !== 'object' ||
    config === null ||
    !Array.isArray(config.groups) ||
    config.groups.length < 1 ||
    !Number.isInteger(config.maxChunksPerRequest) ||
    !Number.isInteger(config.maxHashesPerRequest)
  ) {
    throw new InvalidArgumentError(
      'config',
      "must be the runtime's resolved config (runtime.config)",
    );
  }
  if (typeof buffers !== 'object' || buffers === null) {
    throw new InvalidArgumentError('buffers', "must be the runtime's buffers (runtime.buffers)");
  }
  const exact = (name: string, b: unknown, bytes: number) => {
    if (!(b instanceof SharedArrayBuffer) || b.byteLength !== bytes) {
      throw new InvalidArgumentError(
        `buffers.${name}`,
        `must be a SharedArrayBuffer of ${bytes} bytes for this config (runtime.buffers.${name})`,
      );
    }
  };
  const state = buffers.state as SharedBuffers | null | undefined;
  if (typeof state !== 'object' || state === null) {
    throw new InvalidArgumentError('buffers.state', "must be the runtime's state buffers");
  }
  const sizes = bufferSizes(config);
  for (const name of Object.keys(sizes) as (keyof SharedBuffers)[]) {
    exact(`state.${name}`, state[name], sizes[name]);
  }
  exact('gpuArena', buffers.gpuArena, config.gpuBlocks * config.bytesPerBlock);
  exact(
    'tierArena',
    buffers.tierArena,
    config.tierChunks * config.blocksPerChunk * config.bytesPerBlock,
  );
  exact('doorbells', buffers.doorbells, DOORBELL_BUFFER_BYTES);
  exact('stats', buffers.stats, STATS_BUFFER_BYTES);
  exact('control', buffers.control, CONTROL_BUFFER_BYTES);
  exact('tierStats', buffers.tierStats, TIER_STATS_BYTES);
  exact('memory', buffers.memory, MEMORY_BUFFER_BYTES);
  const rings = buffers.rings as Record<RingName, unknown> | null | undefined;
  if (typeof rings !== 'object' || rings === null) {
    throw new InvalidArgumentError('buffers.rings', "must be the runtime's rings");
  }
  for (const name of Object.keys(RINGS) as RingName[]) {
    const b = rings[name];
    // Ring sizes vary (the submit ring follows the config): a power of two of at least 64 words.
    const words = b instanceof SharedArrayBuffer ? b.byteLength / 4 - 2 * LINE_WORDS : 0;
    if (!(words >= 64 && Number.isInteger(words) && (words & (words - 1)) === 0)) {
      throw new InvalidArgumentError(
        `buffers.rings.${name}`,
        'must be a SharedArrayBuffer ring of the runtime (runtime.buffers.rings)',
      );
    }
  }
}
