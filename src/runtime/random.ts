// A small seeded generator (mulberry32) for lag jitter and the engine
// simulator: reproducible per seed, independent per role.
export class Random {
  private s: number;
  constructor(seed: number) {
    this.s = seed | 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    this.s = (this.s + 0x6d2b79f5) | 0;
    let t = Math.imul(this.s ^ (this.s >>> 15), this.s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return p > 0 && this.next() < p;
  }
}
