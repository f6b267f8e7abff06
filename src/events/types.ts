// KV events as kvoff publishes them: vLLM's event model (BlockStored,
// BlockRemoved, AllBlocksCleared in batches), one event per tier change.
// A kvoff chunk is one vLLM "block" of `tokensPerChunk` tokens whose block
// hash is the chunk's 64-bit offload key (the key word its tier names it by);
// docs/serve.md ("KV events") says how a router derives it from tokens.
import { InvalidArgumentError } from '../errors.js';
import { refuseUnknownKeys } from '../known-keys.js';
import type { KnownKeys } from '../known-keys.js';

/** Where an entry lives: vLLM's name for host memory, then kvoff's lower levels. */
export const MEDIA = ['CPU', 'DISK', 'REDIS'] as const;
export type Medium = (typeof MEDIA)[number];

/** vLLM's KVCacheSpecKind values for kvoff's group kinds. */
export const SPEC_KIND = {
  full: 'full_attention',
  'sliding-window': 'sliding_window',
  mamba: 'mamba',
} as const;

export interface BlockStored {
  readonly type: 'BlockStored';
  /** Offload keys of consecutive chunks of one group, each the parent of the next. */
  readonly blockHashes: readonly bigint[];
  /** The key of the chunk before the first one, null for chunk 0 or when not known. */
  readonly parentBlockHash: bigint | null;
  /** The chunks' tokens, tokensPerChunk per chunk; empty when not known (blockSize 0 then). */
  readonly tokenIds: readonly number[];
  /** Tokens per block hash: the group's tokensPerChunk, or 0 without tokens (vLLM's placeholder). */
  readonly blockSize: number;
  readonly medium: Medium;
  /** The KV group, null when the level does not know it. */
  readonly groupIdx: number | null;
  readonly kvCacheSpecKind: string | null;
  /** The sliding window in tokens, for a sliding-window group. */
  readonly kvCacheSpecSlidingWindow: number | null;
}

export interface BlockRemoved {
  readonly type: 'BlockRemoved';
  readonly blockHashes: readonly bigint[];
  readonly medium: Medium;
  readonly groupIdx: number | null;
}

export interface AllBlocksCleared {
  readonly type: 'AllBlocksCleared';
}

export type KvEvent = BlockStored | BlockRemoved | AllBlocksCleared;

/** One published batch: what a ZeroMQ message, a stream item and an SSE event carry. */
export interface KvEventBatch {
  /** Sequence number, from 0, one per batch (the PUB message's second frame). */
  readonly seq: number;
  /** Seconds since the epoch (float), when the batch was formed. */
  readonly ts: number;
  readonly events: readonly KvEvent[];
  readonly dataParallelRank: number;
}

/**
 * `array`: events as tagged msgpack arrays and replay replies (seq, payload),
 * vLLM's wire before 0.26 (what its examples/online_serving/
 * kv_events_subscriber.py decodes); `map`: events as tagged maps and replay
 * replies led by the topic, as vLLM 0.26 sends them.
 */
export type EventWire = 'array' | 'map';

/** `OffloadRuntime.start({ events })`: KV events of every tier change. */
export interface EventsOptions {
  /**
   * ZeroMQ PUB endpoint, as vLLM's: `tcp://*:5557` (or with `::`, or ipc://,
   * inproc://) is bound, any other address is connected to (a collector that
   * binds). Without it events go only to `runtime.events()`.
   */
  endpoint?: string;
  /** ROUTER endpoint (always bound) answering replays from the buffer; none by default. */
  replayEndpoint?: string;
  /** First frame of every message; default '' (subscribers filter on it). */
  topic?: string;
  /** Batches kept for replay; default 10,000 (vLLM's). */
  bufferSteps?: number;
  /** PUB high-water mark per subscriber; default 100,000 (vLLM's). */
  hwm?: number;
  /** Default 'array'. */
  wire?: EventWire;
}

export const EVENTS_DEFAULTS = {
  topic: '',
  bufferSteps: 10_000,
  hwm: 100_000,
  wire: 'array',
} as const;

export type ResolvedEventsOptions = Required<Omit<EventsOptions, 'endpoint' | 'replayEndpoint'>> &
  Pick<EventsOptions, 'endpoint' | 'replayEndpoint'>;

const EVENTS_OPTION_KEYS: KnownKeys<EventsOptions> = {
  endpoint: true,
  replayEndpoint: true,
  topic: true,
  bufferSteps: true,
  hwm: true,
  wire: true,
};

const ENDPOINT = /^(tcp:\/\/[^\s/]+:(\d+|\*)|ipc:\/\/\S+|inproc:\/\/\S+)$/;

/** Every option checked and defaulted; InvalidArgumentError names the bad one. */
export function resolveEventsOptions(o: unknown): ResolvedEventsOptions {
  if (typeof o !== 'object' || o === null || Array.isArray(o)) {
    throw new InvalidArgumentError('events', 'must be an object');
  }
  const e = o as EventsOptions;
  refuseUnknownKeys(e, EVENTS_OPTION_KEYS, 'events.');
  for (const name of ['endpoint', 'replayEndpoint'] as const) {
    const v: unknown = e[name];
    if (v !== undefined && (typeof v !== 'string' || !ENDPOINT.test(v))) {
      throw new InvalidArgumentError(
        `events.${name}`,
        'must be a ZeroMQ endpoint: tcp://HOST:PORT (PORT * picks one), ipc://PATH or inproc://NAME',
      );
    }
  }
  if (e.replayEndpoint !== undefined && e.endpoint === undefined) {
    throw new InvalidArgumentError('events.replayEndpoint', 'needs events.endpoint');
  }
  // Two wildcard ports are two ports; the same fixed address twice is a mistake.
  if (
    e.replayEndpoint !== undefined &&
    e.replayEndpoint === e.endpoint &&
    !e.endpoint.includes('*')
  ) {
    throw new InvalidArgumentError('events.replayEndpoint', 'must differ from events.endpoint');
  }
  if (e.topic !== undefined && typeof e.topic !== 'string') {
    throw new InvalidArgumentError('events.topic', 'must be a string');
  }
  const int = (name: 'bufferSteps' | 'hwm', min: number, max: number): number => {
    const v: unknown = e[name];
    if (v === undefined) return EVENTS_DEFAULTS[name];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new InvalidArgumentError(`events.${name}`, `must be an integer in [${min}, ${max}]`);
    }
    return v;
  };
  if (e.wire !== undefined && e.wire !== 'array' && e.wire !== 'map') {
    throw new InvalidArgumentError('events.wire', "must be 'array' or 'map'");
  }
  return {
    ...(e.endpoint !== undefined ? { endpoint: e.endpoint } : {}),
    ...(e.replayEndpoint !== undefined ? { replayEndpoint: e.replayEndpoint } : {}),
    topic: e.topic ?? EVENTS_DEFAULTS.topic,
    bufferSteps: int('bufferSteps', 1, 1 << 20),
    hwm: int('hwm', 1, 1 << 24),
    wire: e.wire ?? EVENTS_DEFAULTS.wire,
  };
}
