// A caller's array of integers, read exactly once. Role methods validate an
// input and then write it; if they read the caller's object twice, what they
// write need not be what they checked: a Proxy or an accessor can answer
// differently on each read, and an Int32Array over a SharedArrayBuffer can be
// changed by another thread in between. A length that grew after the check
// wrote past the request's own region into the next slot's memory. So each
// role reads `length` once and every entry once into private memory, checks
// that copy, and writes only from it.
import { InvalidArgumentError } from '../errors.js';

export class IntInput {
  private scratch: Int32Array;

  constructor(initialLength = 64) {
    this.scratch = new Int32Array(initialLength);
  }

  /**
   * The length of `values`, read once: an array-like (an object with a
   * numeric length) whose length is an integer in [0, lengthMax]. `tooLong`
   * makes the error for a longer one (a capacity error, say).
   */
  static lengthOf(
    values: ArrayLike<number>,
    what: string,
    lengthMax: number,
    tooLong: (length: number) => Error,
    rule = 'must be an array of integers',
  ): number {
    if (values === null || typeof values !== 'object') throw new InvalidArgumentError(what, rule);
    const n: unknown = values.length;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
      throw new InvalidArgumentError(what, rule);
    }
    if (n > lengthMax) throw tooLong(n);
    return n;
  }

  /**
   * Copies entries [0, n) of `values`, each read once and checked to be an
   * integer in [lo, hi], into private memory; returns a view of the copy,
   * valid until the next read. Throws InvalidArgumentError naming `what[i]`.
   */
  read(
    values: ArrayLike<number>,
    n: number,
    what: string,
    lo: number,
    hi: number,
    // Built only on failure: a template string per call cost a string
    // allocation and two number conversions on every batch.
    rule?: string,
  ): Int32Array {
    if (this.scratch.length < n) {
      let size = this.scratch.length;
      while (size < n) size *= 2;
      this.scratch = new Int32Array(size);
    }
    const out = this.scratch;
    for (let i = 0; i < n; i += 1) {
      const v: unknown = values[i];
      if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
        throw new InvalidArgumentError(
          `${what}[${i}]`,
          rule ?? `must be an integer in [${lo}, ${hi}]`,
        );
      }
      out[i] = v;
    }
    return out.subarray(0, n);
  }

  /** A prompt's token IDs read once into a fresh Int32Array (what lookups hash); InvalidArgumentError otherwise. */
  static promptTokens(values: ArrayLike<number>): Int32Array {
    const n = IntInput.lengthOf(
      values,
      'promptTokens',
      0x7fffffff,
      () => new InvalidArgumentError('promptTokens', 'is too long'),
      'must be an array of token IDs',
    );
    return new IntInput(n).read(
      values,
      n,
      'promptTokens',
      0,
      0x7fffffff,
      'must be an integer token ID in [0, 2^31)',
    );
  }
}
