// A circuit breaker for a remote level. Closed: operations run; after
// `failuresMax` consecutive failures it opens. Open: operations are refused
// (the caller drops stores and answers misses, counted) until `openMs` has
// passed; then it is half-open and lets exactly one probe through. The probe's
// success closes it, its failure opens it again for another `openMs`.
export type BreakerState = 'closed' | 'open' | 'half-open';

export class CircuitBreaker {
  private failures = 0;
  private openedAtMs = -Infinity;
  private probing = false;
  private opened = false;

  constructor(
    readonly failuresMax: number,
    readonly openMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get state(): BreakerState {
    if (!this.opened) return 'closed';
    return this.now() - this.openedAtMs >= this.openMs && !this.probing ? 'half-open' : 'open';
  }

  /** True when the circuit is open (or half-open with its probe taken). */
  get isOpen(): boolean {
    return this.opened;
  }

  /**
   * May an operation run now? In half-open state the first caller gets the
   * probe (and must report success or failure); everyone else is refused.
   */
  allow(): { ok: boolean; probe: boolean } {
    if (!this.opened) return { ok: true, probe: false };
    if (this.state !== 'half-open') return { ok: false, probe: false };
    this.probing = true;
    return { ok: true, probe: true };
  }

  success(probe: boolean): void {
    if (this.opened && !probe) return; // a late answer from before the circuit opened
    this.failures = 0;
    this.opened = false;
    this.probing = false;
  }

  failure(probe: boolean): void {
    if (this.opened) {
      if (probe) {
        this.probing = false;
        this.openedAtMs = this.now();
      }
      return;
    }
    this.failures += 1;
    if (this.failures >= this.failuresMax) {
      this.opened = true;
      this.openedAtMs = this.now();
    }
  }
}
