// A futex-style mutex on one shared Int32 (Drepper's "mutex3": 0 free, 1
// held, 2 held with waiters): try a compare-exchange, spin briefly, then
// Atomics.wait with a bounded timeout. Worker threads only (the main thread
// never waits).

const FREE = 0;
const HELD = 1;
const CONTENDED = 2;
const SPINS = 64;
const WAIT_MS = 5;
/** Acquisition attempts before a lock counts as lost (a bug, not contention). */
const ACQUIRE_ATTEMPTS_MAX = 10_000_000;

export class SpinFutexLock {
  constructor(private readonly word: Int32Array) {}

  lock(): void {
    let c = Atomics.compareExchange(this.word, 0, FREE, HELD);
    if (c === FREE) return;
    for (let i = 0; i < SPINS; i += 1) {
      c = Atomics.compareExchange(this.word, 0, FREE, HELD);
      if (c === FREE) return;
    }
    for (let attempt = 0; attempt < ACQUIRE_ATTEMPTS_MAX; attempt += 1) {
      if (c === CONTENDED || Atomics.compareExchange(this.word, 0, HELD, CONTENDED) !== FREE) {
        Atomics.wait(this.word, 0, CONTENDED, WAIT_MS);
      }
      c = Atomics.compareExchange(this.word, 0, FREE, CONTENDED);
      if (c === FREE) return;
    }
    throw new Error('mutex design: lock not acquired');
  }

  unlock(): void {
    if (Atomics.sub(this.word, 0, 1) !== HELD) {
      Atomics.store(this.word, 0, FREE);
      Atomics.notify(this.word, 0, 1);
    }
  }
}
