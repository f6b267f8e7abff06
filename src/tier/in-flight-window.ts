// A delay-based bound on a remote level's stores in flight: back-pressure
// that backs off before a wave of timeouts. A fixed deep bound let thousands
// of SETs wait in the client's pipeline on a slow cluster until they hit their
// timeout together, which counted as errors and opened the circuit (the tiers
// benchmark, cluster at nice 10 on a loaded 2-core box: 44% of the stores
// dropped, 1,262 errors). So the bound moves: each store that completes
// within `latencyHighMs` raises it by one (up to `max`); one slower, or failed
// after that long, halves it (down to `min`), at most once per `latencyHighMs`
// so one slow burst counts as one signal rather than thousands.
import { invariant } from '../errors.js';

export class InFlightWindow {
  private limitNow: number;
  private halvedAtMs = -Infinity;

  constructor(
    readonly min: number,
    readonly max: number,
    readonly latencyHighMs: number,
    initial: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    invariant(
      Number.isInteger(min) && min >= 1 && min <= max,
      'an in-flight window has 1 <= min <= max',
    );
    invariant(latencyHighMs > 0, 'an in-flight window has a positive latency mark');
    this.limitNow = Math.min(max, Math.max(min, Math.floor(initial)));
  }

  /** Stores that may be in flight now. */
  get limit(): number {
    return this.limitNow;
  }

  /** A store that reached the level (answered, or failed after `latencyMs`). */
  completed(latencyMs: number): void {
    if (latencyMs <= this.latencyHighMs) {
      if (this.limitNow < this.max) this.limitNow += 1;
      return;
    }
    const t = this.now();
    if (t - this.halvedAtMs < this.latencyHighMs) return;
    this.halvedAtMs = t;
    this.limitNow = Math.max(this.min, Math.floor(this.limitNow / 2));
  }
}
