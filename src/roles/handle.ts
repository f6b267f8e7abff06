// A request handle names one incarnation of a slot. Every role method checks it
// against the slot's generation first, so a handle kept past `release` (or a
// slot reused by another request) gets a StaleHandleError and never touches the
// new occupant's data.
import { InvalidArgumentError, StaleHandleError } from '../errors.js';
import { S_GENERATION, S_STATUS, STATUS_NAMES, dirtyWordCount } from '../layout.js';
import type { StatusCode } from '../layout.js';
import type { SharedState } from '../state.js';

export interface RequestHandle {
  readonly slot: number;
  readonly generation: number;
}

/**
 * The caller's handle read once into a plain object that public methods use
 * from then on. Read again, a getter or a Proxy could name one slot when the
 * handle is checked and another (a different live request) when it is
 * written. A non-object is passed through for checkHandle to refuse; one
 * whose fields cannot be read (a revoked Proxy) is an InvalidArgumentError.
 */
export function ownHandle(handle: RequestHandle): RequestHandle {
  if (typeof handle !== 'object' || handle === null) return handle;
  try {
    return { slot: handle.slot, generation: handle.generation };
  } catch {
    throw new InvalidArgumentError('handle', 'must be a request handle whose fields can be read');
  }
}

/**
 * A batch's handles, each read once (as ownHandle) into objects this role
 * view owns and reuses: fresh objects stored into a long-lived array cost a
 * write barrier each and made the batch calls a third slower. A non-object
 * entry is kept as given, for checkHandle to refuse.
 */
export class HandleCopies {
  private readonly pool: { slot: number; generation: number }[] = [];
  private readonly out: RequestHandle[] = [];

  /** Copies of handles[0, n), valid until the next copy. */
  copy(handles: readonly RequestHandle[], n: number): readonly RequestHandle[] {
    const { pool, out } = this;
    while (pool.length < n) pool.push({ slot: 0, generation: 0 });
    out.length = n;
    for (let i = 0; i < n; i += 1) {
      const h = handles[i]!;
      if (typeof h !== 'object' || h === null) {
        out[i] = h;
        continue;
      }
      const c = pool[i]!;
      try {
        c.slot = h.slot;
        c.generation = h.generation;
      } catch {
        throw new InvalidArgumentError(
          `handles[${i}]`,
          'must be a request handle whose fields can be read',
        );
      }
      out[i] = c;
    }
    return out;
  }
}

export function checkHandle(state: SharedState, handle: RequestHandle): void {
  if (
    typeof handle !== 'object' ||
    handle === null ||
    !Number.isInteger(handle.slot) ||
    handle.slot < 0 ||
    handle.slot >= state.config.maxRequests
  ) {
    throw new InvalidArgumentError(
      'handle',
      `must name a slot in [0, ${state.config.maxRequests})`,
    );
  }
  const now = Atomics.load(state.control, state.schedulerWord(handle.slot, S_GENERATION));
  // Odd generations are occupied; an even one means the slot is free.
  if (now !== handle.generation || (now & 1) === 0) {
    throw new StaleHandleError(handle.slot, handle.generation, now);
  }
}

export function statusOf(state: SharedState, slot: number): StatusCode {
  return Atomics.load(state.control, state.schedulerWord(slot, S_STATUS)) as StatusCode;
}

export function statusName(status: number): string {
  return STATUS_NAMES[status] ?? `unknown(${status})`;
}

/**
 * The entry count of a role batch; each array of values is then checked
 * against it with `batchValues`. Two calls, not one taking a record of the
 * arrays: a record and Object.entries allocated on every batch call, about
 * 150 ns of a 32-entry batch.
 */
export function batchLength(handles: readonly RequestHandle[]): number {
  if (!Array.isArray(handles)) throw new InvalidArgumentError('handles', 'must be an array');
  return handles.length;
}

/** An array of a role batch (absent is allowed) must have one entry per handle (`n`). */
export function batchValues(name: string, values: ArrayLike<number> | undefined, n: number): void {
  if (values === undefined) return;
  if (values === null || typeof values !== 'object' || values.length !== n) {
    throw new InvalidArgumentError(name, `must be an array with one entry per handle (${n})`);
  }
}

/** Per slot, whether the current batch named it already (an epoch per batch, no clearing). */
export class SlotMarks {
  private readonly mark: Uint32Array;
  private epoch = 0;

  constructor(slots: number) {
    this.mark = new Uint32Array(slots);
  }

  begin(): void {
    this.epoch = (this.epoch + 1) >>> 0;
    if (this.epoch === 0) {
      this.mark.fill(0);
      this.epoch = 1;
    }
  }

  /** Throws InvalidArgumentError if `slot` (a checked handle's) was named before in this batch. */
  once(slot: number, entry: number): void {
    if (this.mark[slot] === this.epoch) {
      throw new InvalidArgumentError(
        `handles[${entry}]`,
        `slot ${slot} is named twice in one batch`,
      );
    }
    this.mark[slot] = this.epoch;
  }
}

/**
 * The dirty bits of one batch, raised together at its end: one Atomics.or
 * per bitmap word the batch touched instead of one per publication. Raised
 * after every write of the batch, so each slot's bit still follows its data
 * (what markDirty guarantees one publication at a time).
 */
export class DirtyBatch {
  private readonly bits: Int32Array;
  private readonly touched: Int32Array;
  private count = 0;

  constructor(slots: number) {
    this.bits = new Int32Array(dirtyWordCount(slots));
    this.touched = new Int32Array(this.bits.length);
  }

  add(slot: number): void {
    const word = slot >>> 5;
    if (this.bits[word] === 0) this.touched[this.count++] = word;
    this.bits[word]! |= 1 << (slot & 31);
  }

  /** Raises every added bit in `dirty` and starts over. */
  raise(dirty: Int32Array): void {
    for (let i = 0; i < this.count; i += 1) {
      const word = this.touched[i]!;
      Atomics.or(dirty, word, this.bits[word]!);
      this.bits[word] = 0;
    }
    this.count = 0;
  }
}
