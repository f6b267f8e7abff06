// What a role is to whoever runs it: a loop object with one bounded step, the
// wait that follows a step (as a value), what it does once stopped, and its
// final figures. The engine simulator, HasherLoop, AllocatorLoop and StoreLoop
// each implement it, and two drivers run the very same objects: real threads
// on the real clock (role-main.ts: Atomics.wait on the role's doorbell, a
// sleep for a pause) and one thread on a virtual clock (the runtime fuzz
// target, src/fuzz/runtime-world.ts: a parked role is runnable again once its
// bell moves or its park times out). No driver keeps its own copy of a role's
// timings.
import type { RuntimeViews } from './buffers.js';
import { DOORBELLS, PARK_MS_MAX } from './thread-words.js';
import type { DoorbellName } from './thread-words.js';

/**
 * After a step: step again at once ('again'; a thread whose event loop must
 * turn yields one turn first), park on the role's doorbell for at most `ms`
 * unless it rang since the step began ('park'), or sleep `ms` whatever rings
 * ('pause': a lag on purpose, or a timer).
 */
export type RoleWait =
  | { readonly kind: 'again' }
  | { readonly kind: 'park'; readonly ms: number }
  | { readonly kind: 'pause'; readonly ms: number };

export interface RoleLoop {
  /** One bounded unit of work; true when anything happened. */
  step(): boolean;
  /** How the role waits after a step that did (or did not) do work. */
  wait(did: boolean): RoleWait;
  /** Once, after the driver left the loop (the stop word was raised). */
  stop(): void;
  /** What the role reports to main at the end (its leak figures). */
  final(): Record<string, number>;
}

export const AGAIN: RoleWait = Object.freeze({ kind: 'again' });

/** A park on the doorbell, bounded by PARK_MS_MAX. */
export function park(ms: number = PARK_MS_MAX): RoleWait {
  return { kind: 'park', ms: Math.min(ms, PARK_MS_MAX) };
}

export function pause(ms: number): RoleWait {
  return { kind: 'pause', ms };
}

/** The idle park of the engine with requests in it (a lookup's back-off, pool pressure): short. */
export const ENGINE_BUSY_PARK_MS = 2;
/** The idle park of the allocator with publications still lagging: short. */
export const ALLOCATOR_BUSY_PARK_MS = 1;
/** The store's drain at close: a step, then this timer, until its copies completed. */
export const STORE_DRAIN_TICK_MS = 1;
/** A hasher's lag pause shorter than this is not taken (below a timer's resolution). */
export const HASHER_PAUSE_MS_MIN = 0.05;

/** Rings every role's doorbell but `self`'s: what a role does after a step that published. */
export function ringOthers(views: RuntimeViews, self: DoorbellName): () => void {
  const others = DOORBELLS.filter((d) => d !== self).map((d) => views.doorbell(d));
  return () => {
    for (const b of others) b.ring();
  };
}
