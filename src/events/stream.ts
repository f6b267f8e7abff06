// `runtime.events()`: KV-event batches as an async iterator with a bounded
// buffer. A consumer that falls behind loses the newest batches, counted in
// `dropped` (the batches' `seq` shows where); the runtime never waits for it.
import type { KvEventBatch } from './types.js';

/** Batches a stream buffers by default before it drops. */
export const STREAM_BUFFER_DEFAULT = 1024;

export class KvEventStream implements AsyncIterableIterator<KvEventBatch> {
  /** Batches lost because the buffer was full. */
  dropped = 0;
  private buffer: KvEventBatch[] = [];
  private head = 0;
  private waiter: ((r: IteratorResult<KvEventBatch>) => void) | undefined;
  private ended = false;

  constructor(
    private readonly bufferMax: number,
    private readonly onEnd: (s: KvEventStream) => void,
    /** Told when a reader starts (true) and stops (false) waiting: a waiting reader is pending work. */
    private readonly onWait: (waiting: boolean) => void = () => {},
  ) {}

  /** Batches waiting to be read. */
  get buffered(): number {
    return this.buffer.length - this.head;
  }

  /** Hands `batch` to the reader, buffers it, or drops it when the buffer is full; false when dropped. */
  push(batch: KvEventBatch): boolean {
    if (this.ended) return false;
    if (this.waiter !== undefined) {
      const w = this.waiter;
      this.waiter = undefined;
      this.onWait(false);
      w({ value: batch, done: false });
      return true;
    }
    if (this.buffered >= this.bufferMax) {
      this.dropped += 1;
      return false;
    }
    this.buffer.push(batch);
    return true;
  }

  /** No more batches: the reader gets what is buffered, then the end. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.onEnd(this);
    if (this.waiter !== undefined && this.buffered === 0) {
      const w = this.waiter;
      this.waiter = undefined;
      this.onWait(false);
      w({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<KvEventBatch>> {
    if (this.buffered > 0) {
      const value = this.buffer[this.head]!;
      this.head += 1;
      // Compact once the consumed head outweighs what is left (amortised O(1)).
      if (this.head > 64 && this.head * 2 > this.buffer.length) {
        this.buffer = this.buffer.slice(this.head);
        this.head = 0;
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    this.onWait(true);
    return new Promise((resolve) => (this.waiter = resolve));
  }

  /** A `break` out of for-await: stop receiving and free the buffer. */
  return(): Promise<IteratorResult<KvEventBatch>> {
    this.buffer = [];
    this.head = 0;
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
