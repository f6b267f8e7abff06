// Records waiting for room in a ring. A producer that finds its ring full keeps
// the record here, in order, and retries on its next step; the bound turns a
// stuck consumer into a loud failure instead of unbounded memory.
import { invariant } from '../errors.js';
import type { SpscRing } from './rings.js';

const OUTBOX_RECORDS_MAX = 1 << 16;

export class Outbox {
  private readonly ring: SpscRing;
  private readonly queue: number[][] = [];

  constructor(ring: SpscRing) {
    this.ring = ring;
  }

  get pending(): number {
    return this.queue.length;
  }

  /** Sends now if nothing is queued and the ring has room, else queues. */
  send(record: number[]): void {
    if (this.queue.length === 0 && this.ring.push(record)) return;
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
