// The default mode of a trace replay: the requests of a trace through the real
// threaded runtime (its scheduler, hasher, allocator and store workers and its
// transfer pool), each prompt synthesized from its hash IDs, at the trace's
// arrival times compressed by `speed`, or as fast as the window of requests in
// flight allows. The runtime offloads prompts only (a later turn's prompt
// reaches earlier outputs through its own hash IDs, never through stored
// decode chunks), with no random aborts and no lag on the hasher and
// allocator, so a prefill in one engine step is stored in one job.
//
// With a window of one request, each request is submitted only after the one
// before it ended and every copy it dispatched completed: the tier then sees
// the very calls the cache mode makes (cache-replay.ts), and both give the
// same hits.
import type { ConfigInput, GroupInput } from '../config.js';
import { InvalidArgumentError, TimeoutError } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { OffloadRuntime } from '../runtime/runtime.js';
import type { RuntimeMemory } from '../runtime/memory.js';
import type { LeakReport, RequestSummary, RuntimeStats } from '../runtime/runtime.js';
import type { TiersOptions } from '../tier/cascade.js';
import type { CacheOptions } from '../tier/policy/index.js';
import type { PerTierCounters } from '../tier/tier-stats.js';
import { chunkKeys, promptTokens } from './tokens.js';
import { checkTraceChunk, traceFigures } from './trace.js';
import type { Trace, TraceFigures } from './trace.js';

/** The runtime's shape for a trace: the geometry, the pool and the tier. */
export interface TraceGeometry {
  groups: GroupInput[];
  blocksPerChunk: number;
  bytesPerBlock: number;
  /** GPU pool in tokens (blocks of the largest tokensPerBlock). */
  gpuTokens: number;
  /** Host tier in tokens; 0: room for every distinct chunk of the trace (nothing is evicted). */
  capacityTokens: number;
  /** Request slots; default 32. */
  maxRequests?: number;
  /** Names the chunk option in errors; default 'blocksPerChunk'. */
  chunkOption?: string;
}

/** Decode tokens of slack per request beyond its output (EAGLE drafts never run here: no eagle group is needed). */
const DECODE_SLACK_TOKENS = 64;

/** A runtime config sized for `trace`: per-request tables for its longest request, the tier for its capacity. */
export function traceRuntimeConfig(trace: Trace, hashing: Hashing, g: TraceGeometry): ConfigInput {
  const option = g.chunkOption ?? 'blocksPerChunk';
  for (const group of g.groups) {
    checkTraceChunk(group.tokensPerBlock * g.blocksPerChunk, trace.blockTokens, option);
  }
  const tpbMin = Math.min(...g.groups.map((x) => x.tokensPerBlock));
  const tpbMax = Math.max(...g.groups.map((x) => x.tokensPerBlock));
  const tpc = g.groups[0]!.tokensPerBlock * g.blocksPerChunk;
  let longest = 0;
  for (const r of trace.requests) {
    longest = Math.max(longest, r.inputLength + Math.max(1, r.outputLength) + DECODE_SLACK_TOKENS);
  }
  const blocks = Math.ceil(longest / tpbMin);
  let tierChunks: number;
  if (g.capacityTokens === 0) {
    // Every distinct chunk of every group, so nothing is ever evicted.
    const distinct = new Set<bigint>();
    for (const r of trace.requests) {
      for (const k of chunkKeys(hashing, r, trace.blockTokens, tpc)) distinct.add(k);
    }
    tierChunks = Math.max(1, distinct.size * g.groups.length);
  } else {
    tierChunks = Math.floor(g.capacityTokens / tpc);
    if (tierChunks < 1) {
      throw new InvalidArgumentError(
        'capacityTokens',
        `${g.capacityTokens} tokens hold no ${tpc}-token chunk (0 means unlimited)`,
      );
    }
  }
  return {
    groups: g.groups,
    blocksPerChunk: g.blocksPerChunk,
    tokensPerHash: gcdAll(g.groups.map((x) => x.tokensPerBlock)),
    offloadPromptOnly: true,
    maxRequests: g.maxRequests ?? 32,
    maxBlocksPerRequest: Math.ceil(blocks / g.blocksPerChunk) * g.blocksPerChunk,
    gpuBlocks: Math.floor(g.gpuTokens / tpbMax),
    tierChunks,
    bytesPerBlock: g.bytesPerBlock,
  };
}

export interface ThreadedReplayOptions {
  config: ConfigInput;
  cache?: CacheOptions;
  /** Requests submitted and not yet ended at once; 1 runs them one by one, as the cache mode. */
  window: number;
  /** Arrival times divided by this; undefined: as fast as the window allows. */
  speed?: number;
  transferThreads?: number;
  tiers?: TiersOptions;
  seed?: number;
  /** Requests holding GPU blocks at once (the engine's); default 16, at most the window. */
  maxRunning?: number;
  /**
   * Cap on each request's output tokens (default: the trace's own). Only
   * prompts are offloaded, so the hits do not depend on it; decoding is most
   * of a replay's engine steps.
   */
  outputTokensMax?: number;
  /** Every this many ended requests, a sample of time and memory (0: none). */
  sampleEvery?: number;
  onProgress?: (done: number, total: number, stats: RuntimeStats) => void;
  /** Called as each request ends, with its index in the trace and its hit tokens. */
  onRequest?: (index: number, hitTokens: number) => void;
}

export interface MemorySample {
  /** Requests ended when it was taken. */
  requests: number;
  seconds: number;
  /** The process's RSS and every worker's heap and external memory (runtime.stats().memory). */
  memory: RuntimeMemory;
}

export interface ThreadedReplayResult {
  trace: TraceFigures;
  /**
   * Prompt tokens served per tier level: its chunk hits times the chunk size
   * (with several groups, every group's chunks count).
   */
  hitTokensByTier: { host: number; disk: number; redis: number };
  completed: number;
  aborted: number;
  preemptions: number;
  chunksStored: number;
  chunksDroppedForCapacity: number;
  holes: number;
  mismatches: number;
  doubleStores: number;
  entriesVerified: number;
  verifyOk: boolean;
  /** From start to close. */
  wallSeconds: number;
  /** From the first submission to the last request's end. */
  runSeconds: number;
  requestsPerSecond: number;
  memory: MemorySample;
  samples: MemorySample[];
  tiers: PerTierCounters;
  leaks?: LeakReport;
}

/** How long a lone request's last copies may take to complete before the replay gives up. */
const SETTLE_MS_MAX = 60_000;
const PROGRESS_TICK_MS = 250;
/** Longest the driver sleeps without news (it then looks again). */
const WAIT_MS_MAX = 1000;

/** The replay's options, checked: the window, the output cap and the speed. */
function checkReplayOptions(options: ThreadedReplayOptions): {
  window: number;
  outputMax: number;
  speed: number | undefined;
} {
  const window = options.window;
  if (!Number.isInteger(window) || window < 1 || window > 4096) {
    throw new InvalidArgumentError('window', 'must be an integer in [1, 4096]');
  }
  const outputMax = options.outputTokensMax ?? Infinity;
  if (outputMax !== Infinity && (!Number.isInteger(outputMax) || outputMax < 1)) {
    throw new InvalidArgumentError('outputTokensMax', 'must be a positive integer');
  }
  const speed = options.speed;
  if (speed !== undefined && !(Number.isFinite(speed) && speed > 0)) {
    throw new InvalidArgumentError('speed', 'must be a positive number');
  }
  return { window, outputMax, speed };
}

/** The runtime a replay runs: no lag, no random aborts, a whole prompt per engine step. */
function startReplayRuntime(
  trace: Trace,
  options: ThreadedReplayOptions,
  window: number,
): Promise<OffloadRuntime> {
  const longestPrompt = Math.max(...trace.requests.map((r) => r.inputLength));
  return OffloadRuntime.start({
    config: options.config,
    ...(options.cache ? { cache: options.cache } : {}),
    transferThreads: options.transferThreads ?? 1,
    // Keys in one publication per prompt, block IDs as soon as allocated: a
    // prefill made in one step is ready, and stored, at once.
    lag: {
      hasherHashesPerWake: 1 << 20,
      allocatorPublishDelayMs: 0,
      jitterMs: 0,
      seed: options.seed ?? 1,
    },
    simulator: {
      seed: options.seed ?? 1,
      abortQueuedRate: 0,
      abortRunningRate: 0,
      // A whole prompt per step: the trace's requests are what the engine runs, not its chunking.
      stepTokenBudget: Math.max(8192, longestPrompt),
      maxRunning: Math.min(options.maxRunning ?? 16, window, options.config.maxRequests ?? 32),
      stepMs: 0,
    },
    ...(options.tiers ? { tiers: options.tiers } : {}),
  });
}

/** What the replay driver counts as requests end and copies complete; its wake-up. */
class ReplayProgress {
  next = 0;
  inFlight = 0;
  done = 0;
  hitTokens = 0;
  holes = 0;
  chunksDispatched = 0;
  chunksCompleted = 0;
  failure: unknown;
  readonly samples: MemorySample[] = [];
  private wake: (() => void) | undefined;

  constructor(
    private readonly runtime: OffloadRuntime,
    private readonly options: ThreadedReplayOptions,
    private readonly n: number,
    private readonly tpc: number,
    private readonly tRun: number,
  ) {}

  /** Wakes the driver if it waits. */
  poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  ended(index: number, s: RequestSummary): void {
    this.inFlight -= 1;
    this.done += 1;
    const h = s.hitChunks * this.tpc;
    this.hitTokens += h;
    this.holes += s.holes;
    this.chunksDispatched += s.chunksStored;
    this.options.onRequest?.(index, h);
    const sampleEvery = this.options.sampleEvery ?? 0;
    if (sampleEvery > 0 && (this.done % sampleEvery === 0 || this.done === this.n)) {
      this.samples.push({
        requests: this.done,
        seconds: (performance.now() - this.tRun) / 1000,
        memory: this.runtime.stats().memory,
      });
    }
    this.poke();
  }

  /** Until poked (an end, a completed copy or a failure) or `ms` passed. */
  wait(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.wake = undefined;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

/** Submits the trace's requests, `window` at a time (at their arrival times with a speed), until every one ended. */
async function driveReplay(
  trace: Trace,
  runtime: OffloadRuntime,
  p: ReplayProgress,
  checked: { window: number; outputMax: number; speed: number | undefined },
  tRun: number,
): Promise<void> {
  const { window, outputMax, speed } = checked;
  const n = trace.requests.length;
  let settleSince = -1;
  while (p.done < n) {
    if (p.failure !== undefined) throw p.failure;
    const now = performance.now();
    // One by one: the next starts once the last one's copies completed too.
    const settled = window > 1 || p.chunksCompleted >= p.chunksDispatched;
    if (window === 1 && p.inFlight === 0 && !settled) {
      if (settleSince < 0) settleSince = now;
      else if (now - settleSince > SETTLE_MS_MAX)
        throw new TimeoutError("the last request's copies", SETTLE_MS_MAX);
    } else settleSince = -1;
    let dueInMs = 0;
    while (p.next < n && p.inFlight < window && settled) {
      const r = trace.requests[p.next]!;
      if (speed !== undefined) {
        dueInMs = tRun + r.timestampMs / speed - now;
        if (dueInMs > 0) break;
      }
      const index = p.next;
      p.next += 1;
      p.inFlight += 1;
      runtime
        .submit({
          promptTokens: Array.from(promptTokens(r, trace.blockTokens)),
          maxDecodeTokens: Math.max(1, Math.min(r.outputLength, outputMax)),
        })
        .then(
          (s) => p.ended(index, s),
          (err: unknown) => {
            p.failure ??= err;
            p.poke();
          },
        );
    }
    // Woken by an end, a completed copy or a failure; by the clock for the next arrival (bounded).
    await p.wait(dueInMs > 0 ? Math.min(dueInMs, WAIT_MS_MAX) : WAIT_MS_MAX);
  }
}

export async function replayThreaded(
  trace: Trace,
  options: ThreadedReplayOptions,
): Promise<ThreadedReplayResult> {
  const t0 = performance.now();
  const checked = checkReplayOptions(options);
  const runtime = await startReplayRuntime(trace, options, checked.window);
  const tpc = runtime.config.groups[0]!.tokensPerChunk;
  const n = trace.requests.length;
  const tRun = performance.now();
  const p = new ReplayProgress(runtime, options, n, tpc, tRun);
  runtime.on('job', (e) => {
    p.chunksCompleted += e.chunks;
    p.poke();
  });
  const ticker = setInterval(
    () => options.onProgress?.(p.done, n, runtime.stats()),
    PROGRESS_TICK_MS,
  );

  try {
    await driveReplay(trace, runtime, p, checked, tRun);
  } catch (err) {
    clearInterval(ticker);
    await runtime.close().catch(() => undefined);
    throw err;
  }
  const runSeconds = (performance.now() - tRun) / 1000;
  clearInterval(ticker);
  options.onProgress?.(p.done, n, runtime.stats());
  const memory: MemorySample = {
    requests: p.done,
    seconds: runSeconds,
    memory: runtime.stats().memory,
  };
  const verify = await runtime.verify();
  const stats = runtime.stats();
  await runtime.close();
  const tiers = runtime.stats().tiers;
  const leaks = runtime.leakReport();
  let promptTokensTotal = 0;
  for (const r of trace.requests) promptTokensTotal += r.inputLength;
  return {
    trace: traceFigures(n, promptTokensTotal, p.hitTokens),
    hitTokensByTier: {
      host: tiers.host.hitChunks * tpc,
      disk: tiers.disk.hitChunks * tpc,
      redis: tiers.redis.hitChunks * tpc,
    },
    completed: stats.completed,
    aborted: stats.aborted,
    preemptions: stats.preemptions,
    chunksStored: stats.chunksStored,
    chunksDroppedForCapacity: stats.chunksDroppedForCapacity,
    holes: Math.max(p.holes, stats.holes, verify.holes),
    mismatches: stats.mismatches,
    doubleStores: verify.doubleStores,
    entriesVerified: verify.entriesChecked,
    verifyOk: verify.ok,
    wallSeconds: (performance.now() - t0) / 1000,
    runSeconds,
    requestsPerSecond: runSeconds > 0 ? n / runSeconds : 0,
    memory,
    samples: p.samples,
    tiers,
    ...(leaks ? { leaks } : {}),
  };
}

function gcdAll(values: readonly number[]): number {
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
  return values.reduce((a, b) => gcd(a, b));
}
