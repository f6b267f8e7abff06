// kvoff's one seeded PRNG, for the fuzzer, the engine simulator, lag jitter and
// generated workloads: sfc32 (Chris Doty-Humphrey's Small Fast Counting
// generator, 128-bit state), seeded through splitmix32 so that nearby seeds
// give unrelated streams. Deterministic on every platform: the same seed always
// gives the same sequence, which is what makes a schedule replayable from its
// seed alone.

/** splitmix32 step: a well-mixed 32-bit value from a 32-bit counter. */
function mix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** `stream` separates independent generators drawn from one seed (scenario, strategy, ...). */
  constructor(seed: number, stream = 0) {
    const s = mix32((seed >>> 0) ^ Math.imul(stream + 1, 0x27d4eb2f));
    this.a = mix32(s);
    this.b = mix32(s + 1);
    this.c = mix32(s + 2);
    this.d = 1;
    for (let i = 0; i < 12; i += 1) this.nextU32(); // let the counter state diffuse
  }

  nextU32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform float in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  /** Uniform integer in [0, n); n must be a positive integer. */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Uniform integer in [lo, hi] (inclusive). */
  between(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
}
