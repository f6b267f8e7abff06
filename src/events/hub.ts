// Main's side of KV events: every few milliseconds it drains the store
// thread's queue (bounded work per tick), forms batches, numbers them, and
// hands each to the ZeroMQ publisher (when an endpoint is configured) and to
// every `runtime.events()` stream. It never waits on shared memory and never
// on a subscriber.
import { performance } from 'node:perf_hooks';
import type { Config } from '../config.js';
import { SpscRing } from '../runtime/rings.js';
import { readEvents } from './queue.js';
import { KvEventStream } from './stream.js';
import type { KvEvent, KvEventBatch, ResolvedEventsOptions } from './types.js';
import { ZmqPublisher } from './zmq-publisher.js';

/** How often main drains the queue: the latency a subscriber sees, at most. */
const POLL_MS = 10;
/** Queue records per batch (a run of stored chunks merges into one event). */
const BATCH_RECORDS_MAX = 512;
/** Batches formed per tick; what is left waits for the next one. */
const BATCHES_PER_TICK_MAX = 16;
/** Bound on the ticks close() spends draining what the store left. */
const CLOSE_DRAIN_ROUNDS_MAX = 1 << 12;
/** How long close() lets queued ZeroMQ sends go out. */
const CLOSE_SEND_MS = 1_000;

/** `stats().events`: what was published and what was lost where. */
export interface EventStats {
  /** Chunk changes the store thread put on the queue to main. */
  queued: number;
  /** Chunk changes the full queue refused: never published. */
  dropped: number;
  /** vLLM events published, to a stream or a socket (a run of stored chunks is one BlockStored; none while nobody listens). */
  published: number;
  /** Batches published (sequence numbers used). */
  batches: number;
  /** Batches `events()` streams and `/v1/events` clients lost because they fell behind. */
  streamDropped: number;
  /** Batches the PUB socket's send queue could not take (their seq is a gap to replay). */
  unsent: number;
  /** Replay requests answered. */
  replays: number;
  /** Open `events()` streams. */
  streams: number;
}

export class EventHub {
  private readonly ring: SpscRing;
  private readonly streams = new Set<KvEventStream>();
  private readonly timer: NodeJS.Timeout;
  private seq = 0;
  private published = 0;
  private streamDropped = 0;
  private closed = false;
  /** Readers awaiting a batch: while any waits, the poll timer keeps the process alive. */
  private waiting = 0;

  private constructor(
    buffer: SharedArrayBuffer,
    private readonly config: Pick<Config, 'groups'>,
    readonly publisher: ZmqPublisher | undefined,
  ) {
    this.ring = new SpscRing(buffer);
    this.timer = setInterval(() => this.poll(), POLL_MS);
    // Events alone never keep the process alive; a reader awaiting one does (onWait).
    this.timer.unref();
  }

  /** Opens the publisher when an endpoint is configured (loading zeromq then). */
  static async open(
    buffer: SharedArrayBuffer,
    config: Pick<Config, 'groups'>,
    options: ResolvedEventsOptions,
  ): Promise<EventHub> {
    const endpoint = options.endpoint;
    const publisher =
      endpoint === undefined ? undefined : await ZmqPublisher.open({ ...options, endpoint });
    return new EventHub(buffer, config, publisher);
  }

  /** A new stream of the batches published from now on. */
  stream(bufferMax: number): KvEventStream {
    const s = new KvEventStream(
      bufferMax,
      (ended) => {
        this.streamDropped += ended.dropped;
        this.streams.delete(ended);
      },
      (waiting) => {
        this.waiting += waiting ? 1 : -1;
        if (this.waiting > 0) this.timer.ref();
        else this.timer.unref();
      },
    );
    if (this.closed) s.end();
    else this.streams.add(s);
    return s;
  }

  stats(queued: number, dropped: number): EventStats {
    let live = 0;
    for (const s of this.streams) live += s.dropped;
    const p = this.publisher?.counters;
    return {
      queued,
      dropped,
      published: this.published,
      batches: this.seq,
      streamDropped: this.streamDropped + live,
      unsent: p?.unsent ?? 0,
      replays: p?.replays ?? 0,
      streams: this.streams.size,
    };
  }

  /** Publishes what the store left (call once the store thread has stopped), ends every stream, closes the sockets. */
  async close(): Promise<void> {
    if (this.closed) return;
    clearInterval(this.timer);
    for (let i = 0; i < CLOSE_DRAIN_ROUNDS_MAX && this.poll() > 0; i += 1);
    this.closed = true;
    for (const s of [...this.streams]) s.end();
    await this.publisher?.close(CLOSE_SEND_MS);
  }

  /** One tick: up to BATCHES_PER_TICK_MAX batches; returns the records read. */
  private poll(): number {
    // Nobody to publish to (kvoff serve with no /v1/events client): free the queue unread.
    if (this.publisher === undefined && this.streams.size === 0) {
      return this.ring.drain(() => {}, BATCHES_PER_TICK_MAX * BATCH_RECORDS_MAX);
    }
    let records = 0;
    for (let b = 0; b < BATCHES_PER_TICK_MAX; b += 1) {
      const events: KvEvent[] = [];
      const n = readEvents(this.ring, this.config, events, BATCH_RECORDS_MAX);
      records += n;
      if (events.length > 0) this.publish(events);
      if (n < BATCH_RECORDS_MAX) break;
    }
    return records;
  }

  private publish(events: readonly KvEvent[]): void {
    const batch: KvEventBatch = {
      seq: this.seq,
      ts: (performance.timeOrigin + performance.now()) / 1000,
      events,
      dataParallelRank: 0,
    };
    this.seq += 1;
    this.published += events.length;
    this.publisher?.publish(batch);
    for (const s of this.streams) s.push(batch);
  }
}
