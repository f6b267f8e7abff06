// The soak: one OffloadRuntime serving small requests for a long time, the way
// a long-running `kvoff serve` does, with every worker's own memory sampled
// once a second. It exists because a leak in a worker is invisible to main's
// heap and to every counter: the store worker once grew about a gigabyte a
// minute while verify() and leakReport() stayed clean.
//
// The workload reuses every slot thousands of times, aborts some requests,
// preempts (a small GPU pool), shares prefixes (tier hits, loads) and keeps a
// small host tier full (eviction); the lower tiers join when given.
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { JOBS_IN_FLIGHT_MAX } from '../../src/runtime/store-options.js';
import type { LeakReport, RequestInput } from '../../src/runtime/runtime.js';
import type { RuntimeMemory, WorkerMemory } from '../../src/runtime/memory.js';
import { SampleLog } from './soak-samples.js';
import type { MemoryPoint } from './soak-samples.js';
import type { TiersOptions } from '../../src/tier/cascade.js';
import type { ConfigInput } from '../../src/config.js';

export interface SoakOptions {
  seconds: number;
  /** Seconds before the memory baseline is taken; default min(60, seconds / 3). */
  warmupSeconds?: number;
  /** Requests submitted and not yet ended, at most. */
  inFlight?: number;
  seed?: number;
  disk?: string;
  redis?: string;
  /** Largest growth of a worker's live heap over its value after warm-up (0.10: 10%). */
  heapGrowthMax?: number;
  /** Largest slope of the process's resident memory after warm-up, MB per minute. */
  rssMbPerMinuteMax?: number;
  /** Called about once a second with the lifecycles so far. */
  onTick?: (done: number, elapsedS: number) => void;
}

/**
 * Seconds between full collections (runtime.collectMemory()): each window of
 * the judge (FLOOR_WINDOW_S_MIN or longer) holds at least two, and a
 * collection of a ~10 MB heap costs each thread a few milliseconds.
 */
export const SOAK_COLLECT_EVERY_S = 5;

/** One sample a second: when, how many lifecycles, every worker's memory. */

export interface WorkerVerdict {
  worker: string;
  /** Live heap (after a full collection; the lowest of the first window after warm-up), bytes; 0: never measured. */
  heapBaselineBytes: number;
  /** Highest later window's live heap over that baseline (1.05: 5% above). */
  heapRatioMax: number;
  /** Least-squares slope of the windows' live heap after warm-up, bytes per minute. */
  heapSlopeBytesPerMinute: number;
  /**
   * The same for the lowest heap-in-use sample per window, not judged: it
   * also counts garbage V8 has not collected yet, which drifts with V8's heap
   * sizing (see FLOOR_WINDOWS).
   */
  heapUsedFloorSlopeBytesPerMinute: number;
  /** The same for external memory. */
  externalSlopeBytesPerMinute: number;
  ok: boolean;
}

export interface SoakReport {
  seconds: number;
  warmupSeconds: number;
  lifecycles: number;
  lifecyclesPerSecond: number;
  completed: number;
  aborted: number;
  preemptions: number;
  tierHits: number;
  tierEvictions: number;
  chunksStored: number;
  /** Most store jobs the planner held at a sample: bounded by the jobs in flight, unless jobs leak. */
  jobsHeldMax: number;
  workers: WorkerVerdict[];
  rssBaselineBytes: number;
  rssSlopeBytesPerMinute: number;
  rssOk: boolean;
  verifyOk: boolean;
  holes: number;
  mismatches: number;
  leaks: LeakReport | undefined;
  leaksOk: boolean;
  ok: boolean;
  /** Why ok is false, one line each. */
  failures: string[];
  points: MemoryPoint[];
}

/** Small requests over many slots: lifecycles are what a leak per request or job scales with. */
const SOAK_CONFIG: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 16, eagle: true },
    { kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 256 },
  ],
  blocksPerChunk: 4,
  tokensPerHash: 16,
  maxRequests: 24,
  maxBlocksPerRequest: 96,
  // A few requests' worth of blocks for 24 slots: admission waits, decoding preempts.
  gpuBlocks: 600,
  // A small host tier: it is full within seconds, then every store evicts.
  tierChunks: 700,
  bytesPerBlock: 64,
};

const PROMPT_TOKENS_MIN = 96;
const PROMPT_TOKENS_SPAN = 480;
const PREFIXES = 32;
/**
 * The run after warm-up is cut into this many equal windows and each
 * figure's lowest value taken per window. The heap is judged on what a full
 * collection leaves (heapLiveBytes, one every SOAK_COLLECT_EVERY_S): the
 * lowest heap-in-use sample of a window also counts garbage V8 had not
 * collected yet, and that drifts with V8's heap sizing: in an 8-minute soak
 * on a loaded machine it rose 12% on main and 35% on the store, while every
 * mark-compact left main's heap between 8.5 and 8.9 MB (node --trace-gc).
 */
const FLOOR_WINDOWS = 6;
/** A window shorter than this holds too few collections (and resident-memory samples) to judge. */
const FLOOR_WINDOW_S_MIN = 10;

function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

function soakRequest(rand: () => number): RequestInput {
  const promptLength = PROMPT_TOKENS_MIN + Math.floor(rand() * PROMPT_TOKENS_SPAN);
  const req: RequestInput = {
    promptLength,
    prefixId: Math.floor(rand() * PREFIXES),
    sharedPrefixTokens: Math.floor(promptLength * (0.25 + 0.5 * rand())),
    maxDecodeTokens: 4 + Math.floor(rand() * 28),
  };
  // About one in ten is aborted part-way through its prompt.
  if (rand() < 0.1) req.abortAfterTokens = 1 + Math.floor(rand() * promptLength);
  return req;
}

function tiersOf(o: SoakOptions): TiersOptions | undefined {
  if (o.disk === undefined && o.redis === undefined) return undefined;
  return {
    ...(o.disk !== undefined ? { disk: { dir: o.disk } } : {}),
    ...(o.redis !== undefined ? { redis: { urls: [o.redis] } } : {}),
    // Authenticated entries, as a deployment runs them (KVOFF_TIER_SECRET, or a soak's own).
    secret: process.env.KVOFF_TIER_SECRET ?? 'kvoff-soak-secret-0123456789abcdef',
  };
}

/** Copy threads of the soak's runtime (the sample log has a column pair for each). */
const SOAK_TRANSFER_THREADS = 1;

/** Runs the soak and judges it; never throws for a leak (the report says so), only for a failed runtime. */
export async function runSoak(o: SoakOptions): Promise<SoakReport> {
  const warmupSeconds = o.warmupSeconds ?? Math.min(60, o.seconds / 3);
  const inFlight = o.inFlight ?? 64;
  const rand = xorshift(o.seed ?? 1);
  const tiers = tiersOf(o);
  const runtime = await OffloadRuntime.start({
    config: SOAK_CONFIG,
    transferThreads: SOAK_TRANSFER_THREADS,
    lag: { seed: o.seed ?? 1 },
    simulator: { seed: o.seed ?? 1, maxRunning: 16, stepTokenBudget: 2048 },
    ...(tiers ? { tiers } : {}),
  });
  const t0 = performance.now();
  const endMs = t0 + o.seconds * 1000;
  let done = 0;
  let failure: unknown;
  // One sample a second, and room for the final one and timer drift.
  const log = new SampleLog(Math.ceil(o.seconds) + 16, SOAK_TRANSFER_THREADS);
  // Collect before the first sample: false when gc() is not exposed (judged as unmeasured).
  const collects = runtime.collectMemory();
  let nextCollectS = SOAK_COLLECT_EVERY_S;
  const sample = () => {
    const atS = (performance.now() - t0) / 1000;
    if (collects && atS >= nextCollectS) {
      runtime.collectMemory();
      nextCollectS = atS + SOAK_COLLECT_EVERY_S;
    }
    const stats = runtime.stats();
    log.add(atS, done, stats.jobsHeld, stats.memory);
    o.onTick?.(done, atS);
  };
  const sampler = setInterval(sample, 1000);
  // Keep `inFlight` requests going: each lifecycle that ends starts the next.
  await new Promise<void>((resolve) => {
    let running = 0;
    const next = () => {
      while (running < inFlight && failure === undefined && performance.now() < endMs) {
        running += 1;
        runtime.submit(soakRequest(rand)).then(
          () => {
            running -= 1;
            done += 1;
            next();
          },
          (err: unknown) => {
            running -= 1;
            failure ??= err;
            next();
          },
        );
      }
      if (running === 0) resolve();
    };
    next();
  });
  clearInterval(sampler);
  sample();
  const points = log.points();
  const elapsedS = (performance.now() - t0) / 1000;
  if (failure !== undefined) {
    await runtime.close().catch(() => undefined);
    throw failure;
  }
  const verify = await runtime.verify();
  const stats = runtime.stats();
  await runtime.close();
  const leaks = runtime.leakReport();
  return judge(o, {
    warmupSeconds,
    elapsedS,
    done,
    points,
    verifyOk: verify.ok,
    holes: Math.max(verify.holes, stats.holes),
    mismatches: verify.mismatches + stats.mismatches,
    leaks,
    stats,
  });
}

interface Run {
  warmupSeconds: number;
  elapsedS: number;
  done: number;
  points: MemoryPoint[];
  verifyOk: boolean;
  holes: number;
  mismatches: number;
  leaks: LeakReport | undefined;
  stats: ReturnType<OffloadRuntime['stats']>;
}

function judge(o: SoakOptions, r: Run): SoakReport {
  const heapGrowthMax = o.heapGrowthMax ?? 0.1;
  const rssMax = (o.rssMbPerMinuteMax ?? 1) * 1024 * 1024;
  const after = r.points.filter((p) => p.atS >= r.warmupSeconds);
  const workers = judgeWorkers(r.points, r.warmupSeconds, heapGrowthMax);
  const rssFloors = floors(after, (p) => p.memory.rssBytes);
  const rssSlope = slopePerMinute(rssFloors);
  const failures: string[] = [];
  for (const w of workers) {
    if (w.ok) continue;
    failures.push(
      w.heapBaselineBytes === 0
        ? `${w.worker}: no heap after a full collection was measured (run node with --expose-gc; npm run soak does)`
        : `${w.worker}: live heap reached ${w.heapRatioMax.toFixed(3)}x its value after warm-up (bound ${(1 + heapGrowthMax).toFixed(2)}x), slope ${mb(w.heapSlopeBytesPerMinute)} MB/min`,
    );
  }
  const rssOk = rssFloors.length < 2 || rssSlope <= rssMax;
  if (!rssOk)
    failures.push(
      `resident memory grew ${mb(rssSlope)} MB/min after warm-up (bound ${mb(rssMax)})`,
    );
  const jobsHeldMax = Math.max(0, ...r.points.map((p) => p.jobsHeld));
  if (jobsHeldMax > JOBS_IN_FLIGHT_MAX) {
    failures.push(
      `the planner held ${jobsHeldMax} store jobs at once, more than can be in flight (${JOBS_IN_FLIGHT_MAX}): completed jobs are not released`,
    );
  }
  if (!r.verifyOk) failures.push('verify() found a mismatch, a hole or a double store');
  const leaks = r.leaks;
  const leaksOk = leaks !== undefined && Object.values(leaks).every((v) => v === 0);
  if (!leaksOk) failures.push(`close() left something over: ${JSON.stringify(leaks)}`);
  const host = r.stats.tiers.host;
  return {
    seconds: round(r.elapsedS, 1),
    warmupSeconds: r.warmupSeconds,
    lifecycles: r.done,
    lifecyclesPerSecond: round(r.done / r.elapsedS, 1),
    completed: r.stats.completed,
    aborted: r.stats.aborted,
    preemptions: r.stats.preemptions,
    tierHits: r.stats.tierHits,
    tierEvictions: host.evictions,
    chunksStored: r.stats.chunksStored,
    jobsHeldMax,
    workers,
    rssBaselineBytes: rssFloors[0]?.value ?? 0,
    rssSlopeBytesPerMinute: Math.round(rssSlope),
    rssOk,
    verifyOk: r.verifyOk,
    holes: r.holes,
    mismatches: r.mismatches,
    leaks,
    leaksOk,
    ok: failures.length === 0,
    failures,
    points: r.points,
  };
}

function workerNames(points: readonly MemoryPoint[]): string[] {
  const last = points.at(-1)?.memory;
  if (last === undefined) return [];
  const names: string[] = ['main'];
  for (const role of ['scheduler', 'hasher', 'allocator', 'store'] as const) {
    if (last[role] !== undefined) names.push(role);
  }
  last.transfer.forEach((_, i) => names.push(`transfer-${i}`));
  return names;
}

function workerOf(m: RuntimeMemory, worker: string): WorkerMemory | undefined {
  return worker.startsWith('transfer-')
    ? m.transfer[Number(worker.slice('transfer-'.length))]
    : m[worker as 'main' | 'scheduler' | 'hasher' | 'allocator' | 'store'];
}

/**
 * Every worker's verdict on the samples after warm-up. A worker passes when
 * its live heap (after a full collection) stays within 1 + growthMax of its
 * first window's; one with no live figure fails, since nothing was measured.
 */
export function judgeWorkers(
  points: readonly MemoryPoint[],
  warmupSeconds: number,
  growthMax: number,
): WorkerVerdict[] {
  const after = points.filter((p) => p.atS >= warmupSeconds);
  return workerNames(after).map((worker) => {
    const of = (p: MemoryPoint) => workerOf(p.memory, worker);
    const live = floors(after, (p) => of(p)?.heapLiveBytes);
    const used = floors(after, (p) => of(p)?.heapUsedBytes);
    const external = floors(after, (p) => of(p)?.externalBytes);
    const base = live[0]?.value ?? 0;
    const ratioMax = base > 0 ? Math.max(1, ...live.map((f) => f.value / base)) : 1;
    return {
      worker,
      heapBaselineBytes: base,
      heapRatioMax: round(ratioMax, 3),
      heapSlopeBytesPerMinute: Math.round(slopePerMinute(live)),
      heapUsedFloorSlopeBytesPerMinute: Math.round(slopePerMinute(used)),
      externalSlopeBytesPerMinute: Math.round(slopePerMinute(external)),
      ok: base > 0 && ratioMax <= 1 + growthMax,
    };
  });
}

interface Floor {
  atS: number;
  value: number;
}

/** The lowest sample of each window after warm-up (see FLOOR_WINDOWS). */
function floors(
  points: readonly MemoryPoint[],
  of: (p: MemoryPoint) => number | undefined,
): Floor[] {
  const first = points[0]?.atS ?? 0;
  const span = (points.at(-1)?.atS ?? first) - first;
  const windowS = Math.max(FLOOR_WINDOW_S_MIN, span / FLOOR_WINDOWS);
  const count = Math.max(1, Math.floor(span / windowS));
  const out: Floor[] = [];
  for (let w = 0; w < count; w += 1) {
    let value = Number.POSITIVE_INFINITY;
    for (const p of points) {
      if (p.atS < first + w * windowS || p.atS >= first + (w + 1) * windowS) continue;
      const v = of(p);
      if (v !== undefined && v < value) value = v;
    }
    if (value !== Number.POSITIVE_INFINITY) out.push({ atS: first + (w + 0.5) * windowS, value });
  }
  return out;
}

/** Least-squares slope, per minute. */
function slopePerMinute(f: readonly Floor[]): number {
  if (f.length < 2) return 0;
  const n = f.length;
  const mx = f.reduce((s, p) => s + p.atS, 0) / n;
  const my = f.reduce((s, p) => s + p.value, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of f) {
    num += (p.atS - mx) * (p.value - my);
    den += (p.atS - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 60;
}

function mb(bytes: number): string {
  return (bytes / (1024 * 1024)).toFixed(2);
}

function round(v: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}
