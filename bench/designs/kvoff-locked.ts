// Design (c): one shared mutex around all state, as a skilled engineer would
// write it: a writer takes the lock once per batch (one round: its sources of
// one chunk index over every request), not per publication, and the store
// holds it for one pass. The same role and planner code as design (a) over
// the same SharedArrayBuffer layout, without the lock-free machinery the lock
// makes unnecessary: the planner does not re-validate its snapshot (no writer
// can run while it holds the lock), so a pass never retries. The store parks
// on the same doorbell as (a) when a pass finds nothing.
import { resolveConfig } from '../../src/config.js';
import { SharedState } from '../../src/state.js';
import { epochMs } from '../lib/clock.js';
import { ThreadCpuClock } from '../lib/cpu.js';
import type { Round } from '../lib/threads.js';
import { KvoffStore, KvoffWriters } from './kvoff.js';
import type { KvoffSetup } from './kvoff.js';
import { SpinFutexLock } from './lock.js';
import { STORE_PARK_MS, attachBell, checkDeadline, paceRound } from './stream.js';
import type { Source, StoreOutcome, StreamShape, WriterOutcome } from './stream.js';

export interface LockedSetup extends KvoffSetup {
  /** One Int32 lock word on its own line. */
  readonly lock: SharedArrayBuffer;
}

export function newLockBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(64);
}

export function lockedWriterThread(
  p: LockedSetup & { shape: StreamShape; sources: readonly Source[]; roundMs?: number },
  round: Round,
  ready: () => void,
): WriterOutcome {
  const state = SharedState.attach(resolveConfig(p.config), p.buffers);
  const writers = new KvoffWriters(state, p.pub, p.shape, p.handles);
  const lock = new SpinFutexLock(new Int32Array(p.lock, 0, 1));
  const bell = attachBell(p.bell);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  let events = 0;
  for (let c = 0; c < p.shape.chunks; c += 1) {
    paceRound(round.startMs, p.roundMs, c);
    lock.lock();
    try {
      writers.publishRound(c, p.sources);
      events += p.shape.requests * p.sources.length;
    } finally {
      lock.unlock();
    }
    bell.ring();
  }
  return { events, threadCpuMs: cpu.elapsed() };
}

export function lockedStoreThread(
  p: LockedSetup & { shape: StreamShape },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const state = SharedState.attach(resolveConfig(p.config), p.buffers);
  // Under the lock no writer runs, so the seqlock re-check after pinning is moot.
  const store = new KvoffStore(state, p.pub, p.shape, { unsafeSkipRevalidate: true });
  const lock = new SpinFutexLock(new Int32Array(p.lock, 0, 1));
  const bell = attachBell(p.bell);
  const total = p.shape.requests * p.shape.chunks;
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  for (let pass = 0; store.dispatched < total; pass += 1) {
    const seen = bell.read();
    const before = store.dispatched;
    lock.lock();
    try {
      store.pass();
    } finally {
      lock.unlock();
    }
    if (store.dispatched === before) bell.park(seen, STORE_PARK_MS);
    if ((pass & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design c');
  }
  return store.outcome(epochMs() - round.startMs, cpu);
}
