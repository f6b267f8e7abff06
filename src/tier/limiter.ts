// A counting limiter for async work: at most `max` run at once, the rest wait
// in a FIFO of bounded length. `tryRun` refuses (returns undefined) instead of
// queueing past the bound, so callers can drop and count rather than pile up.
import { invariant } from '../errors.js';

export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    readonly max: number,
    readonly queueMax: number,
  ) {
    invariant(Number.isInteger(max) && max >= 1, 'a limiter runs at least one task');
    invariant(Number.isInteger(queueMax) && queueMax >= 0, 'a limiter queue bound is >= 0');
  }

  /** Running plus waiting. */
  get size(): number {
    return this.active + this.waiting.length;
  }

  get running(): number {
    return this.active;
  }

  /** True when tryRun would refuse. */
  get full(): boolean {
    return this.active >= this.max && this.waiting.length >= this.queueMax;
  }

  /** Runs `task` when a place is free; undefined (and nothing runs) when the queue is full. */
  tryRun<T>(task: () => Promise<T>): Promise<T> | undefined {
    if (this.full) return undefined;
    return this.run(task);
  }

  /** Runs `task` when a place is free, queueing past the bound if needed (for short, rare work). */
  async run<T>(task: () => Promise<T>): Promise<T> {
    // A finishing task hands its place straight to the first waiter, so
    // `active` never exceeds `max` whatever order callers arrive in.
    if (this.active >= this.max) {
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.active += 1;
    }
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.active -= 1;
    }
  }
}
