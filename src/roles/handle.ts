// A request handle names one incarnation of a slot. Every role method checks it
// against the slot's generation first, so a handle kept past `release` (or a
// slot reused by another request) gets a StaleHandleError and never touches the
// new occupant's data.
import { InvalidArgumentError, StaleHandleError } from '../errors.js';
import { S_GENERATION, S_STATUS, STATUS_NAMES } from '../layout.js';
import type { StatusCode } from '../layout.js';
import type { SharedState } from '../state.js';

export interface RequestHandle {
  readonly slot: number;
  readonly generation: number;
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
