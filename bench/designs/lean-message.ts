// Design (b-lean): message passing written by hand with the least work per
// event. Writer threads postMessage each delta (source, request, chunk, value)
// to a store thread that owns plain, unshared arrays and applies the same rule
// (storeWindow) to the request the delta touched: no role classes, no
// planner, no tier, no pins. Every delta is structured-cloned and crosses the
// store's event loop. (Design b runs kvoff's code behind the same messages.)
// The publication times are instrumentation, written by the writers into a
// shared table as in every design; they are not part of the messages.
import { receiveMessageOnPort } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';
import { storeWindow, emptyWindow } from '../../src/ready.js';
import { epochMs } from '../lib/clock.js';
import { ThreadCpuClock } from '../lib/cpu.js';
import type { Round } from '../lib/threads.js';
import {
  LatencyLog,
  SOURCE_BLOCKS,
  SOURCE_KEYS,
  blockIdOf,
  checkDeadline,
  STORE_PARK_MS,
  attachBell,
  keyOf,
  paceRound,
  readyAtMs,
  stampRound,
} from './stream.js';
import type { Source, StoreOutcome, StreamShape, WriterOutcome } from './stream.js';

/** Words of one delta in a batch: source, request, chunk, value. */
export const DELTA_WORDS = 4;

export interface MessageWriterParams {
  readonly shape: StreamShape;
  readonly sources: readonly Source[];
  readonly port: MessagePort;
  /** Deltas per message; above 1 a batch is a transferred Float64Array, also sent at the end of each round. */
  readonly batch: number;
  /** Rung after each message, for a store that drains its ports with receiveMessageOnPort. */
  readonly bell?: SharedArrayBuffer;
  /** The publication-time table (see stampRound). */
  readonly pub: SharedArrayBuffer;
  /** Offered load (see paceRound); absent: as fast as possible. */
  readonly roundMs?: number;
}

export interface MessageStoreParams {
  readonly shape: StreamShape;
  readonly ports: readonly MessagePort[];
  readonly pub: SharedArrayBuffer;
}

export function messageWriterThread(
  p: MessageWriterParams,
  round: Round,
  ready: () => void,
): WriterOutcome {
  const { shape, port } = p;
  const bell = p.bell === undefined ? undefined : attachBell(p.bell);
  const pub = new Float64Array(p.pub);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  let events = 0;
  let buf = new Float64Array(p.batch * DELTA_WORDS);
  let fill = 0;
  const flush = () => {
    port.postMessage(buf.subarray(0, fill * DELTA_WORDS), [buf.buffer]);
    buf = new Float64Array(p.batch * DELTA_WORDS);
    fill = 0;
    bell?.ring();
  };
  for (let c = 0; c < shape.chunks; c += 1) {
    paceRound(round.startMs, p.roundMs, c);
    for (const source of p.sources) {
      stampRound(pub, shape, c, source);
      for (let r = 0; r < shape.requests; r += 1) {
        const value =
          source === SOURCE_KEYS
            ? keyOf(shape, r, c)
            : source === SOURCE_BLOCKS
              ? blockIdOf(shape, r, c)
              : c + 1;
        events += 1;
        if (p.batch === 1) {
          port.postMessage([source, r, c, value]);
          bell?.ring();
          continue;
        }
        const at = fill * DELTA_WORDS;
        buf[at] = source;
        buf[at + 1] = r;
        buf[at + 2] = c;
        buf[at + 3] = value;
        fill += 1;
        if (fill === p.batch) flush();
      }
    }
    // The end of a round is a batch boundary too, as the shared-memory designs ring once per round.
    if (fill > 0) flush();
  }
  return { events, threadCpuMs: cpu.elapsed() };
}

export function messageStoreThread(
  p: MessageStoreParams,
  round: Round,
  ready: () => void,
): Promise<StoreOutcome> {
  const { shape } = p;
  const R = shape.requests;
  const C = shape.chunks;
  const total = R * C;
  // The store's own state: ordinary arrays, touched by this thread only.
  const tokenChunks = new Int32Array(R);
  const keyCount = new Int32Array(R);
  const blockCount = new Int32Array(R);
  const cursor = new Int32Array(R);
  const keys = new Float64Array(R * C);
  const blocks = new Int32Array(R * C);
  const pub = new Float64Array(p.pub);
  const latency = new LatencyLog(total);
  const window = emptyWindow();
  let dispatched = 0;
  let messages = 0;
  let jobs = 0;
  // No go to wait for: its loop is idle until the first message.
  const cpu = new ThreadCpuClock();

  return new Promise<StoreOutcome>((resolve, reject) => {
    const apply = (source: number, r: number, c: number, value: number) => {
      // Deltas of one source arrive in order (one port per writer), so counts are c + 1.
      if (source === 0) tokenChunks[r] = value;
      else if (source === 1) {
        keys[r * C + c] = value;
        keyCount[r] = c + 1;
      } else {
        blocks[r * C + c] = value;
        blockCount[r] = c + 1;
      }
      const w = storeWindow(
        'ready-prefix',
        tokenChunks[r]!,
        keyCount[r]!,
        blockCount[r]!,
        cursor[r]!,
        0,
        1,
        window,
      );
      if (w.end === w.start) return;
      const now = epochMs();
      const job: number[] = [];
      for (let k = w.start; k < w.end; k += 1) {
        job.push(keys[r * C + k]!, blocks[r * C + k]!);
        latency.record(now - readyAtMs(pub, shape, r, k));
      }
      dispatched += w.end - w.start;
      jobs += 1;
      cursor[r] = w.advanceTo;
    };
    const finish = () => {
      const elapsedMs = epochMs() - round.startMs;
      const threadCpuMs = cpu.elapsed();
      for (const port of p.ports) port.close();
      resolve({
        dispatchedChunks: dispatched,
        elapsedMs,
        latenciesMs: latency.recorded(),
        notes: { messages, jobs },
        threadCpuMs,
      });
    };
    const onMessage = (m: number[] | Float64Array) => {
      try {
        messages += 1;
        for (let at = 0; at + DELTA_WORDS <= m.length; at += DELTA_WORDS) {
          apply(m[at]!, m[at + 1]!, m[at + 2]!, m[at + 3]!);
        }
        if (dispatched >= total) finish();
        else if ((messages & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design b');
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    };
    for (const port of p.ports) port.on('message', onMessage);
    ready();
  });
}

/**
 * Design (b-lean-batched): the lean store above, written as a skilled engineer
 * would batch it. Writers send transferred Float64Array batches (no clone of
 * the payload) and ring a doorbell; the store drains every port with
 * receiveMessageOnPort (no event-loop task per message), applies the deltas,
 * then computes the window once per request the batch touched, and parks on
 * the doorbell (bounded) when the ports are empty.
 */
export function leanBatchedStoreThread(
  p: MessageStoreParams & { bell: SharedArrayBuffer },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const { shape } = p;
  const R = shape.requests;
  const C = shape.chunks;
  const total = R * C;
  const tokenChunks = new Int32Array(R);
  const keyCount = new Int32Array(R);
  const blockCount = new Int32Array(R);
  const cursor = new Int32Array(R);
  const keys = new Float64Array(R * C);
  const blocks = new Int32Array(R * C);
  const pub = new Float64Array(p.pub);
  const touched = new Uint8Array(R);
  const touchedList = new Int32Array(R);
  const latency = new LatencyLog(total);
  const window = emptyWindow();
  const bell = attachBell(p.bell);
  let dispatched = 0;
  let messages = 0;
  let drains = 0;
  let jobs = 0;
  let touchedCount = 0;
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  while (dispatched < total) {
    const seen = bell.read();
    let got = 0;
    for (const port of p.ports) {
      for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) {
        const d = m.message as Float64Array | number[];
        got += 1;
        for (let at = 0; at + DELTA_WORDS <= d.length; at += DELTA_WORDS) {
          const source = d[at]!;
          const r = d[at + 1]!;
          const c = d[at + 2]!;
          if (source === 0) tokenChunks[r] = d[at + 3]!;
          else if (source === 1) {
            keys[r * C + c] = d[at + 3]!;
            keyCount[r] = c + 1;
          } else {
            blocks[r * C + c] = d[at + 3]!;
            blockCount[r] = c + 1;
          }
          if (touched[r] === 0) {
            touched[r] = 1;
            touchedList[touchedCount++] = r;
          }
        }
      }
    }
    if (got === 0) {
      bell.park(seen, STORE_PARK_MS);
      checkDeadline(round.startMs, epochMs(), 'design b-lean-batched');
      continue;
    }
    messages += got;
    drains += 1;
    const now = epochMs();
    for (let i = 0; i < touchedCount; i += 1) {
      const r = touchedList[i]!;
      touched[r] = 0;
      const w = storeWindow(
        'ready-prefix',
        tokenChunks[r]!,
        keyCount[r]!,
        blockCount[r]!,
        cursor[r]!,
        0,
        1,
        window,
      );
      if (w.end === w.start) continue;
      const job: number[] = [];
      for (let k = w.start; k < w.end; k += 1) {
        job.push(keys[r * C + k]!, blocks[r * C + k]!);
        latency.record(now - readyAtMs(pub, shape, r, k));
      }
      dispatched += w.end - w.start;
      jobs += 1;
      cursor[r] = w.advanceTo;
    }
    touchedCount = 0;
  }
  const elapsedMs = epochMs() - round.startMs;
  const threadCpuMs = cpu.elapsed();
  for (const port of p.ports) port.close();
  return {
    dispatchedChunks: dispatched,
    elapsedMs,
    latenciesMs: latency.recorded(),
    notes: { messages, drains, jobs },
    threadCpuMs,
  };
}
