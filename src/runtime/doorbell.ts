// Doorbells: a word per consumer that producers bump (Atomics.add) and notify.
// A consumer reads the word, checks for work, and parks only if the word has not
// moved since it read it, so a notify between its check and its park is never
// lost. Every park is bounded (PARK_MS_MAX). Workers park with Atomics.wait;
// the main thread and async workers (the store, which must keep its event loop
// turning for piscina completions) use Atomics.waitAsync.
import { PARK_MS_MAX } from './thread-words.js';

export class Doorbell {
  readonly words: Int32Array;
  readonly index: number;

  constructor(words: Int32Array, index: number) {
    this.words = words;
    this.index = index;
  }

  /** The value to pass to park(); read it before checking for work. */
  read(): number {
    return Atomics.load(this.words, this.index);
  }

  ring(): void {
    Atomics.add(this.words, this.index, 1);
    Atomics.notify(this.words, this.index);
  }

  /** Blocks at most `ms` (capped) unless the bell moved since `seen`. Worker threads only. */
  park(seen: number, ms: number = PARK_MS_MAX): void {
    Atomics.wait(this.words, this.index, seen, Math.min(ms, PARK_MS_MAX));
  }

  /** Resolves when rung after `seen` or after at most `ms` (capped). Never blocks the thread. */
  parkAsync(seen: number, ms: number = PARK_MS_MAX): Promise<unknown> {
    const r = Atomics.waitAsync(this.words, this.index, seen, Math.min(ms, PARK_MS_MAX));
    // Already rung: still yield a full event-loop turn (a resolved promise would
    // only queue a microtask, and a loop of those starves message ports, e.g. piscina's).
    if (!r.async) return new Promise((resolve) => setImmediate(resolve, r.value));
    // A pending waitAsync does not keep the event loop alive; a timer of the same length does.
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      r.value,
      new Promise((resolve) => {
        timer = setTimeout(resolve, Math.min(ms, PARK_MS_MAX) + 1);
      }),
    ]).finally(() => clearTimeout(timer));
  }
}
