// Benchmark 2: snapshots under contention. 1, 2 or 3 writer threads play the
// scheduler, hasher and allocator roles on the same request slots as fast as
// they can, while a store thread takes consistent snapshots (StoreRole.snapshot,
// read the newest entries, StoreRole.stable). Run with padded hot words (each
// role's line on its own 64-byte cache line) and unpadded (lines packed: every
// write by one role invalidates the line the others use: false sharing).
//
// Writers use the role classes (SchedulerRole.progress/preempt,
// AllocatorRole.appendBlocks/nullBlock/clear: the real seqlock writes). The key
// writer follows the hasher's publication protocol on its own line (entry,
// then Atomics.store of the count) but wraps its count at capacity, which no
// real hasher does: it lets a bounded request run for the whole measurement.
import { resolveConfig } from '../src/config.js';
import type { ConfigInput } from '../src/config.js';
import type { Hashing } from '../src/hashing.js';
import { H_KEY_COUNT, SNAPSHOT_RETRIES_MAX } from '../src/layout.js';
import type { SharedBuffers } from '../src/layout.js';
import { AllocatorRole } from '../src/roles/allocator.js';
import type { RequestHandle } from '../src/roles/handle.js';
import { HasherRole } from '../src/roles/hasher.js';
import { SchedulerRole } from '../src/roles/scheduler.js';
import { RequestSnapshot, StoreRole } from '../src/roles/store.js';
import { SharedState } from '../src/state.js';
import { epochMs } from './lib/clock.js';
import type { Figure } from './lib/stats.js';
import { figure, ratioFigure } from './lib/stats.js';
import type { Round, ThreadPool } from './lib/threads.js';

export type WriterRole = 'scheduler' | 'hasher' | 'allocator';

/** Which roles each writer thread plays, by writer count. */
export const WRITER_SPLITS: Readonly<Record<number, readonly (readonly WriterRole[])[]>> = {
  0: [],
  1: [['scheduler', 'hasher', 'allocator']],
  2: [['scheduler', 'hasher'], ['allocator']],
  3: [['scheduler'], ['hasher'], ['allocator']],
};

const TOKENS_PER_BLOCK = 16;
const WINDOW_BLOCKS = 4;

export function snapshotConfig(requests: number, padHotWords: boolean): ConfigInput {
  return {
    groups: [
      { kind: 'full', tokensPerBlock: TOKENS_PER_BLOCK },
      {
        kind: 'sliding-window',
        tokensPerBlock: TOKENS_PER_BLOCK,
        windowTokens: WINDOW_BLOCKS * TOKENS_PER_BLOCK,
      },
    ],
    tokensPerHash: TOKENS_PER_BLOCK,
    maxRequests: requests,
    maxBlocksPerRequest: 512,
    // Room for every table to be full at once: the writer cycles block IDs,
    // and the allocator refuses an ID still held by another request.
    gpuBlocks: Math.max(4096, requests * 2 * 512 + 1),
    tierChunks: 16,
    padHotWords,
  };
}

export interface SnapshotWriterParams {
  readonly config: ConfigInput;
  readonly buffers: SharedBuffers;
  readonly handles: readonly RequestHandle[];
  readonly roles: readonly WriterRole[];
}

export interface SnapshotStoreParams {
  readonly config: ConfigInput;
  readonly buffers: SharedBuffers;
}

export interface WriterResult {
  readonly ops: number;
  readonly elapsedMs: number;
}

export interface StoreResult {
  readonly snapshots: number;
  readonly retries: number;
  readonly givenUp: number;
  readonly elapsedMs: number;
}

/** Checks the stop word once per this many writer steps (cheap, still prompt). */
const STOP_CHECK_EVERY = 64;
/** Hard cap on writer steps per round, so a missed stop can never spin forever. */
const STEPS_MAX = 2e9;

/** Hashing is never called here (hash(h, 0) only adopts the line); fail loudly if it is. */
const NO_HASHING: Hashing = {
  algorithm: 'sha256',
  chain: () => {
    throw new Error('snapshot bench: hashing not expected');
  },
};

/** Main thread: fresh state with `requests` open, running requests, every writer line adopted. */
export function setupSnapshotState(config: ConfigInput): {
  state: SharedState;
  handles: RequestHandle[];
} {
  const resolved = resolveConfig(config);
  const state = SharedState.create(resolved);
  const scheduler = new SchedulerRole(state);
  const hasher = new HasherRole(state, NO_HASHING);
  const allocator = new AllocatorRole(state);
  const prompt = new Int32Array(resolved.maxTokensPerRequest);
  const handles: RequestHandle[] = [];
  for (let r = 0; r < resolved.maxRequests; r += 1) {
    const h = scheduler.open({ requestId: r, promptTokens: prompt });
    hasher.hash(h, 0);
    allocator.appendBlocks(h, 0, []);
    scheduler.progress(h, 0, 0);
    handles.push(h);
  }
  // The writer threads drive the roles from here on.
  scheduler.handOff();
  allocator.handOff();
  return { state, handles };
}

export function snapshotWriterThread(
  p: SnapshotWriterParams,
  round: Round,
  ready: () => void,
): WriterResult {
  const config = resolveConfig(p.config);
  const state = SharedState.attach(config, p.buffers);
  const scheduler = new SchedulerRole(state);
  const allocator = new AllocatorRole(state);
  const { control, keys, groupCount } = state;
  const R = p.handles.length;
  const maxTokens = config.maxTokensPerRequest;
  const maxBlocks = config.maxBlocksPerRequest;
  const maxKeys = config.maxChunksPerRequest;
  const doScheduler = p.roles.includes('scheduler');
  const doHasher = p.roles.includes('hasher');
  const doAllocator = p.roles.includes('allocator');
  // Each writer keeps its own view of what it has published (it is the only writer of it).
  const computed = new Int32Array(R);
  const keyCount = new Int32Array(R * groupCount);
  const blockCount = new Int32Array(R * groupCount);
  const one = new Int32Array(1);
  let nextBlock = 1;
  let ops = 0;
  ready();
  round.waitGo();
  for (let step = 0; step < STEPS_MAX; step += 1) {
    if (step % STOP_CHECK_EVERY === 0 && round.stopped) break;
    const r = step % R;
    const h = p.handles[r]!;
    // One sweep over every request per group, groups in turn.
    const g = Math.floor(step / R) % groupCount;
    if (doScheduler) {
      let c = computed[r]! + TOKENS_PER_BLOCK;
      if (c > maxTokens) {
        scheduler.preempt(h);
        c = TOKENS_PER_BLOCK;
      }
      scheduler.progress(h, c, TOKENS_PER_BLOCK);
      computed[r] = c;
      ops += 1;
    }
    if (doHasher) {
      const at = r * groupCount + g;
      const n = keyCount[at]!;
      keys[state.keyBase(h.slot, g) + n] = 0x9e3779b97f4a7c15n;
      const next = n + 1 === maxKeys ? 0 : n + 1;
      Atomics.store(control, state.hasherWord(h.slot, H_KEY_COUNT + g), next);
      keyCount[at] = next;
      ops += 1;
    }
    if (doAllocator) {
      const at = r * groupCount + g;
      if (blockCount[at] === maxBlocks) {
        allocator.clear(h); // a preemption-style clear: a seqlock write over every group
        for (let k = 0; k < groupCount; k += 1) blockCount[r * groupCount + k] = 0;
      }
      one[0] = nextBlock;
      nextBlock = nextBlock + 1 === config.gpuBlocks ? 1 : nextBlock + 1;
      allocator.appendBlocks(h, g, one);
      const n = (blockCount[at] = blockCount[at]! + 1);
      ops += 1;
      if (config.groups[g]!.windowChunks !== null && n > WINDOW_BLOCKS) {
        allocator.nullBlock(h, g, n - 1 - WINDOW_BLOCKS); // slid out of the window: a seqlock write
        ops += 1;
      }
    }
  }
  return { ops, elapsedMs: epochMs() - round.startMs };
}

export function snapshotStoreThread(
  p: SnapshotStoreParams,
  round: Round,
  ready: () => void,
): StoreResult {
  const config = resolveConfig(p.config);
  const state = SharedState.attach(config, p.buffers);
  const role = new StoreRole(state);
  const snap = new RequestSnapshot(state.groupCount);
  let snapshots = 0;
  let retries = 0;
  let givenUp = 0;
  let sink = 0;
  ready();
  round.waitGo();
  for (let pass = 0; pass < STEPS_MAX && !round.stopped; pass += 1) {
    for (let slot = 0; slot < config.maxRequests; slot += 1) {
      let done = false;
      for (let attempt = 0; attempt < SNAPSHOT_RETRIES_MAX && !done; attempt += 1) {
        const taken = role.snapshot(slot, snap);
        if (taken === 'free') {
          done = true;
          break;
        }
        if (taken === 'ok') {
          // Read the newest entry of each group, as a planner reading its window would.
          for (let g = 0; g < state.groupCount; g += 1) {
            const k = snap.keyCount[g]!;
            const b = snap.blockCount[g]!;
            if (k > 0 && role.key(snap, g, k - 1) !== 0n) sink += 1;
            if (b > 0) sink += role.block(snap, g, b - 1);
          }
          if (role.stable(snap)) {
            snapshots += 1;
            done = true;
            break;
          }
        }
        retries += 1;
      }
      if (!done) givenUp += 1;
    }
  }
  if (sink === -1) console.log('unreachable'); // keeps the reads observable
  return { snapshots, retries, givenUp, elapsedMs: epochMs() - round.startMs };
}

export interface SnapshotOptions {
  readonly requests: number;
  readonly writerCounts: readonly number[];
  readonly durationMs: number;
  readonly repeats: number;
}

export interface SnapshotRow {
  readonly writers: number;
  readonly padded: boolean;
  readonly snapshotsPerSecond: Figure;
  readonly retryRatePercent: Figure;
  readonly givenUpPerSecond: Figure;
  readonly writerOpsPerSecond: Figure;
}

export interface SnapshotResults {
  readonly description: string;
  readonly requests: number;
  readonly durationMsPerRepeat: number;
  readonly rows: readonly SnapshotRow[];
  /** Per writer count: padded / unpadded, paired per repeat. */
  readonly paddedOverUnpadded: readonly {
    writers: number;
    snapshots: Figure;
    writerOps: Figure;
  }[];
}

export async function runSnapshotBench(
  pool: ThreadPool,
  options: SnapshotOptions,
): Promise<SnapshotResults> {
  const rows: SnapshotRow[] = [];
  const raw = new Map<string, { snaps: number[]; ops: number[] }>();
  for (const writers of options.writerCounts) {
    const split = WRITER_SPLITS[writers];
    if (split === undefined) throw new Error(`no writer split for ${writers} writers`);
    // Padded and unpadded alternate within each repeat so drift on a shared machine hits both.
    const samples = new Map<
      boolean,
      { snaps: number[]; retry: number[]; gaveUp: number[]; ops: number[] }
    >();
    for (const padded of [true, false])
      samples.set(padded, { snaps: [], retry: [], gaveUp: [], ops: [] });
    for (let rep = 0; rep < options.repeats; rep += 1) {
      for (const padded of [true, false]) {
        const config = snapshotConfig(options.requests, padded);
        const { state, handles } = setupSnapshotState(config);
        const tasks = [
          { kind: 'snapshot-store', params: { config, buffers: state.buffers } },
          ...split.map((roles) => ({
            kind: 'snapshot-writer',
            params: { config, buffers: state.buffers, handles, roles },
          })),
        ];
        const [store, ...ws] = (await pool.run(tasks, { durationMs: options.durationMs })) as [
          StoreResult,
          ...WriterResult[],
        ];
        const s = samples.get(padded)!;
        const seconds = store.elapsedMs / 1000;
        s.snaps.push(store.snapshots / seconds);
        s.retry.push((100 * store.retries) / Math.max(1, store.snapshots + store.retries));
        s.gaveUp.push(store.givenUp / seconds);
        s.ops.push(ws.reduce((sum, w) => sum + w.ops / (w.elapsedMs / 1000), 0));
      }
    }
    for (const padded of [true, false]) {
      const s = samples.get(padded)!;
      raw.set(`${writers}:${padded}`, { snaps: s.snaps, ops: s.ops });
      rows.push({
        writers,
        padded,
        snapshotsPerSecond: figure(s.snaps, 'snapshots/s'),
        retryRatePercent: figure(s.retry, '%'),
        givenUpPerSecond: figure(s.gaveUp, 'slots/s'),
        writerOpsPerSecond: figure(s.ops, 'publications/s'),
      });
    }
  }
  const paddedOverUnpadded = options.writerCounts.map((writers) => {
    const p = raw.get(`${writers}:true`)!;
    const u = raw.get(`${writers}:false`)!;
    return {
      writers,
      snapshots: ratioFigure(p.snaps, u.snaps),
      writerOps: writers === 0 ? figure([1], 'ratio') : ratioFigure(p.ops, u.ops),
    };
  });
  return {
    description:
      'Store thread taking consistent snapshots of every slot in a loop while 0-3 writer threads publish progress, keys and blocks (with sliding-window nulling and clears under the seqlock) as fast as they can. Padded: each role line on its own 64-byte cache line; unpadded: lines packed.',
    requests: options.requests,
    durationMsPerRepeat: options.durationMs,
    rows,
    paddedOverUnpadded,
  };
}
