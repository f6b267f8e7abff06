// A single-producer single-consumer ring of variable-length Int32 records in
// one SharedArrayBuffer. The producer writes a record's words, then publishes
// the new tail with Atomics.store; the consumer reads the tail first, reads the
// record, then publishes the new head. Head and tail are free-running 32-bit
// positions (differences taken with `| 0`), each on its own 64-byte line.
//
// A record is [length, ...payload]. When a record does not fit before the end
// of the data area, the producer writes WRAP and continues at index 0.
import { InvalidArgumentError, invariant } from '../errors.js';
import { LINE_WORDS } from '../layout.js';

const HEAD = 0;
const TAIL = LINE_WORDS;
const DATA = 2 * LINE_WORDS;
const WRAP = -1;

export function ringBufferBytes(capacityWords: number): number {
  invariant(
    capacityWords >= 64 && (capacityWords & (capacityWords - 1)) === 0,
    'ring capacity is a power of two of at least 64 words',
  );
  return (DATA + capacityWords) * 4;
}

export class SpscRing {
  readonly words: Int32Array;
  readonly capacity: number;
  private readonly mask: number;
  /** Largest payload one record may carry. */
  readonly recordWordsMax: number;

  constructor(buffer: SharedArrayBuffer) {
    this.words = new Int32Array(buffer);
    this.capacity = this.words.length - DATA;
    invariant(
      this.capacity >= 64 && (this.capacity & (this.capacity - 1)) === 0,
      'ring capacity is a power of two',
    );
    this.mask = this.capacity - 1;
    this.recordWordsMax = (this.capacity >> 1) - 1;
  }

  static create(capacityWords: number): SpscRing {
    return new SpscRing(new SharedArrayBuffer(ringBufferBytes(capacityWords)));
  }

  get buffer(): SharedArrayBuffer {
    return this.words.buffer as SharedArrayBuffer;
  }

  /** Words queued (producer's or consumer's view; exact when called by either side). */
  get used(): number {
    return (Atomics.load(this.words, TAIL) - Atomics.load(this.words, HEAD)) | 0;
  }

  /** Producer: appends one record; false (nothing written) when the ring lacks room. */
  push(payload: ArrayLike<number>): boolean {
    return this.pushParts(payload);
  }

  /** Producer: appends one record made of several parts written back to back. */
  pushParts(...parts: ArrayLike<number>[]): boolean {
    let n = 0;
    for (const p of parts) n += p.length;
    if (n > this.recordWordsMax) {
      throw new InvalidArgumentError('record', `at most ${this.recordWordsMax} words, got ${n}`);
    }
    const w = this.words;
    let tail = Atomics.load(w, TAIL);
    const head = Atomics.load(w, HEAD);
    let index = tail & this.mask;
    const pad = index + 1 + n > this.capacity ? this.capacity - index : 0;
    if (((tail - head) | 0) + pad + 1 + n > this.capacity) return false;
    if (pad > 0) {
      w[DATA + index] = WRAP;
      tail = (tail + pad) | 0;
      index = 0;
    }
    w[DATA + index] = n;
    let at = DATA + index + 1;
    for (const p of parts) for (let i = 0; i < p.length; i += 1) w[at++] = p[i]!;
    Atomics.store(w, TAIL, (tail + 1 + n) | 0);
    return true;
  }

  /**
   * Consumer: hands the next record's payload (a view into the ring, valid
   * only during the call) to `fn`, then frees it. False when the ring is empty.
   */
  pop(fn: (payload: Int32Array) => void): boolean {
    const w = this.words;
    let head = Atomics.load(w, HEAD);
    const tail = Atomics.load(w, TAIL);
    if (head === tail) return false;
    let index = head & this.mask;
    let n = w[DATA + index]!;
    if (n === WRAP) {
      head = (head + (this.capacity - index)) | 0;
      index = 0;
      invariant(head !== tail, 'a wrap marker is followed by a record');
      n = w[DATA]!;
    }
    if (!(n >= 0 && n <= this.recordWordsMax)) invariant(false, `ring record length ${n} is valid`);
    try {
      fn(w.subarray(DATA + index + 1, DATA + index + 1 + n));
    } finally {
      Atomics.store(w, HEAD, (head + 1 + n) | 0);
    }
    return true;
  }

  /**
   * Where the producer has written up to, as a free-running position: every
   * record pushed before this call ends at or before it. With consumedTo(),
   * a consumer can tell when it has read everything that was in the ring at
   * a moment, however much was pushed since.
   */
  producedTo(): number {
    return Atomics.load(this.words, TAIL);
  }

  /** Consumer: true once every record that ended at or before `position` (from producedTo) was popped. */
  consumedTo(position: number): boolean {
    return ((Atomics.load(this.words, HEAD) - position) | 0) >= 0;
  }

  /** Consumer: pops up to `max` records; returns how many. */
  drain(fn: (payload: Int32Array) => void, max: number): number {
    let n = 0;
    while (n < max && this.pop(fn)) n += 1;
    return n;
  }
}

/** Int32 words of one offload key (its 256-bit identity) in a record. */
export const KEY_WORDS = 8;

/** Packs an offload key into KEY_WORDS Int32 words, lowest first, and back. */
export function pushKey(out: number[], key: bigint): void {
  for (let w = 0; w < KEY_WORDS; w += 1) {
    out.push(Number((key >> BigInt(32 * w)) & 0xffffffffn) | 0);
  }
}

export function readKey(words: Int32Array, at: number): bigint {
  let key = 0n;
  for (let w = KEY_WORDS - 1; w >= 0; w -= 1) key = (key << 32n) | BigInt(words[at + w]! >>> 0);
  return key;
}
