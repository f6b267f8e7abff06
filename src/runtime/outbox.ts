// Records waiting for room in a ring. A producer that finds its ring full keeps
// the record here, in order, and retries on its next step; the bound turns a
// stuck consumer into a loud failure instead of unbounded memory.
import { invariant } from '../errors.js';
import type { SpscRing } from './rings.js';

const OUTBOX_RECORDS_MAX = 1 << 16;

export class Outbox {
  private readonly ring: SpscRing;
  private readonly queue: number[][] = [];
  /**
   * Held: send() only queues and flush() alone pushes, so the owner publishes
   * what its records report (stats counters) before any of them is seen.
   */
  private readonly held: boolean;

  constructor(ring: SpscRing, options: { held?: boolean } = {}) {
    this.ring = ring;
    this.held = options.held ?? false;
  }

  get pending(): number {
    return this.queue.length;
  }

  /** Sends now if not held, nothing is queued and the ring has room; else queues. */
  send(record: number[]): void {
    if (!this.held && this.queue.length === 0 && this.ring.push(record)) return;
    invariant(this.queue.length < OUTBOX_RECORDS_MAX, 'outbox within its bound (consumer alive)');
    this.queue.push(record);
  }

  /** Pushes queued records in order until the ring is full; returns how many went. */
  flush(): number {
    let n = 0;
    while (n < this.queue.length && this.ring.push(this.queue[n]!)) n += 1;
    if (n > 0) this.queue.splice(0, n);
    return n;
  }
}
