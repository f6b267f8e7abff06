// Design (c-lean): one lock around all state, written by hand with the least
// work per event: no role classes, no planner, no tier, no pins. Writers take
// the lock (SpinFutexLock) once per batch (their sources of one chunk index
// over every request); the store takes it for a whole pass over every request, computing windows with the same rule
// (storeWindow). State lives in a SharedArrayBuffer, read and written plainly
// under the lock. Shows what kvoff's role and planner machinery costs per
// event, next to the mechanism itself (design c runs kvoff's code under a lock).
import { emptyWindow, storeWindow } from '../../src/ready.js';
import { epochMs } from '../lib/clock.js';
import { ThreadCpuClock } from '../lib/cpu.js';
import { SpinFutexLock } from './lock.js';
import type { Round } from '../lib/threads.js';
import {
  LatencyLog,
  STORE_PARK_MS,
  SOURCE_BLOCKS,
  SOURCE_KEYS,
  attachBell,
  blockIdOf,
  checkDeadline,
  newBellBuffer,
  newPubBuffer,
  keyOf,
  paceRound,
  readyAtMs,
  stampRound,
} from './stream.js';
import type { Source, StoreOutcome, StreamShape, WriterOutcome } from './stream.js';

export interface MutexSetup {
  readonly shape: StreamShape;
  /** [lock line (16 words)] then per request: tokenChunks, keyCount, blockCount, cursor. */
  readonly control: SharedArrayBuffer;
  readonly keys: SharedArrayBuffer;
  readonly blocks: SharedArrayBuffer;
  readonly pub: SharedArrayBuffer;
  readonly bell: SharedArrayBuffer;
}

const LOCK_WORDS = 16;
const FIELDS = 4;

export function setupMutexDesign(shape: StreamShape): MutexSetup {
  const n = shape.requests * shape.chunks;
  return {
    shape,
    control: new SharedArrayBuffer((LOCK_WORDS + shape.requests * FIELDS) * 4),
    keys: new SharedArrayBuffer(n * 8),
    blocks: new SharedArrayBuffer(n * 4),
    pub: newPubBuffer(shape),
    bell: newBellBuffer(),
  };
}

class MutexState {
  readonly lock: SpinFutexLock;
  readonly fields: Int32Array;
  readonly keys: Float64Array;
  readonly blocks: Int32Array;
  readonly pub: Float64Array;
  constructor(s: MutexSetup) {
    this.lock = new SpinFutexLock(new Int32Array(s.control, 0, 1));
    this.fields = new Int32Array(s.control, LOCK_WORDS * 4);
    this.keys = new Float64Array(s.keys);
    this.blocks = new Int32Array(s.blocks);
    this.pub = new Float64Array(s.pub);
  }
}

export function mutexWriterThread(
  p: MutexSetup & { sources: readonly Source[]; roundMs?: number },
  round: Round,
  ready: () => void,
): WriterOutcome {
  const st = new MutexState(p);
  const { shape } = p;
  const R = shape.requests;
  const C = shape.chunks;
  const bell = attachBell(p.bell);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  let events = 0;
  for (let c = 0; c < C; c += 1) {
    paceRound(round.startMs, p.roundMs, c);
    st.lock.lock(); // once per batch: this writer's sources of chunk c over every request
    for (const source of p.sources) {
      stampRound(st.pub, shape, c, source);
      if (source === SOURCE_KEYS) {
        for (let r = 0; r < R; r += 1) {
          st.keys[r * C + c] = keyOf(shape, r, c);
          st.fields[r * FIELDS + 1] = c + 1;
        }
      } else if (source === SOURCE_BLOCKS) {
        for (let r = 0; r < R; r += 1) {
          st.blocks[r * C + c] = blockIdOf(shape, r, c);
          st.fields[r * FIELDS + 2] = c + 1;
        }
      } else {
        for (let r = 0; r < R; r += 1) st.fields[r * FIELDS] = c + 1;
      }
      events += R;
    }
    st.lock.unlock();
    bell.ring();
  }
  return { events, threadCpuMs: cpu.elapsed() };
}

export function mutexStoreThread(p: MutexSetup, round: Round, ready: () => void): StoreOutcome {
  const st = new MutexState(p);
  const { shape } = p;
  const R = shape.requests;
  const C = shape.chunks;
  const total = R * C;
  const latency = new LatencyLog(total);
  const window = emptyWindow();
  let dispatched = 0;
  let passes = 0;
  let jobs = 0;
  const bell = attachBell(p.bell);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  while (dispatched < total) {
    const seen = bell.read();
    const before = dispatched;
    st.lock.lock();
    for (let r = 0; r < R; r += 1) {
      const f = r * FIELDS;
      const w = storeWindow(
        'ready-prefix',
        st.fields[f]!,
        st.fields[f + 1]!,
        st.fields[f + 2]!,
        st.fields[f + 3]!,
        0,
        1,
        window,
      );
      if (w.end === w.start) continue;
      const now = epochMs();
      const job: number[] = [];
      for (let k = w.start; k < w.end; k += 1) {
        job.push(st.keys[r * C + k]!, st.blocks[r * C + k]!);
        latency.record(now - readyAtMs(st.pub, shape, r, k));
      }
      dispatched += w.end - w.start;
      jobs += 1;
      st.fields[f + 3] = w.advanceTo;
    }
    st.lock.unlock();
    if (dispatched === before) bell.park(seen, STORE_PARK_MS);
    passes += 1;
    if ((passes & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design c');
  }
  const elapsedMs = epochMs() - round.startMs;
  const threadCpuMs = cpu.elapsed();
  return {
    dispatchedChunks: dispatched,
    elapsedMs,
    latenciesMs: latency.recorded(),
    notes: { passes, jobs },
    threadCpuMs,
  };
}
