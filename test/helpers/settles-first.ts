// Whether a promise settles before the event loop's next turn: the rule behind
// "refused up front" without a wall-clock bound. Spawning a worker, reading a
// file or waiting on a socket needs at least one turn, so a call that rejects
// within the microtasks of its own turn did none of them.
export type FirstSettled<T> =
  | { readonly state: 'fulfilled'; readonly value: T }
  | { readonly state: 'rejected'; readonly error: unknown }
  | { readonly state: 'pending after a turn' };

export function settlesBeforeATurn<T>(p: Promise<T>): Promise<FirstSettled<T>> {
  return Promise.race([
    p.then(
      (value) => ({ state: 'fulfilled' as const, value }),
      (error: unknown) => ({ state: 'rejected' as const, error }),
    ),
    new Promise<FirstSettled<T>>((resolve) =>
      setImmediate(() => resolve({ state: 'pending after a turn' })),
    ),
  ]);
}
