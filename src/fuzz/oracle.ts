// The fuzzer's oracle: the invariants of docs/design.md, named. The checks themselves
// run inside the simulator at the step where each can first be seen (world.ts)
// and once more at the end of a schedule.

export const INVARIANTS = [
  /** 1. No throw, no hang: a role threw (a legacy-assert LegacyAssertionError counts). */
  'crash',
  /** 1. No hang: the schedule did not end within its step limit, or no role could step. */
  'hang',
  /** 2. A finished request has a chunk below its final ready prefix that was never stored. */
  'hole',
  /** 3. Tier bytes differ from their key's expansion, or a chunk was dispatched under another key. */
  'mispairing',
  /** 4. A chunk was dispatched twice in the same request generation. */
  'double-store',
  /** 5. A cursor moved backwards. */
  'cursor-monotonic',
  /** 5. A cursor moved past the ready prefix of the snapshot it was advanced from. */
  'cursor-within-ready',
  /** 6. A block, pin, tier entry or slot was still held after every request ended. */
  'leak',
  /**
   * 7. A lookup answer is not what the specification (spec/lookup-spec.ts) allows over
   * the tier state at that moment, with the request's limits (runtime target).
   */
  'load-decision',
  /**
   * 8. A byte stored before a reset was served after it: a store job in
   * flight at the reset published its entries, or a lookup after it hit an
   * entry published before it.
   */
  'reset',
  /**
   * 9. With tensor-parallel ranks (runtime target): a store job's entry was
   * readable before the store had every rank's acknowledgement of its copy.
   */
  'rank-ack',
] as const;
export type InvariantName = (typeof INVARIANTS)[number];

export interface Violation {
  readonly invariant: InvariantName;
  readonly message: string;
  /** Decision index at which it was detected. */
  readonly decision: number;
}

/** Unwinds a schedule from wherever a check failed (also from inside a planning pass). */
export class ViolationSignal extends Error {
  readonly violation: Violation;
  constructor(violation: Violation) {
    super(`${violation.invariant}: ${violation.message}`);
    this.name = 'ViolationSignal';
    this.violation = violation;
  }
}
