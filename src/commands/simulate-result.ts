// The result of one `kvoff simulate` run and its text form: what runSimulate
// returns, prints, writes with --json and hands to the HTML report.
import type { LeakReport, RuntimeStats } from '../runtime/runtime.js';
import type { RuntimeMemory } from '../runtime/memory.js';
import type { PerTierCounters } from '../tier/tier-stats.js';
import type { SimulatePlan } from './simulate-options.js';
import { count, painter, table } from './term.js';

/** The runtime counters a simulate report carries, as the runtime names them. */
type ReportedStats = Pick<
  RuntimeStats,
  | 'requests'
  | 'completed'
  | 'aborted'
  | 'preemptions'
  | 'chunksStored'
  | 'chunksDeferred'
  | 'chunksSkippedUnready'
  | 'chunksDeferredThenStored'
  | 'allocationRetries'
  | 'tierHits'
  | 'chunksDroppedForCapacity'
  | 'chunksDroppedUnready'
  | 'chunksUnreachable'
  | 'snapshotRetries'
  | 'bytesCopied'
  | 'tierCapacity'
  | 'loadFailures'
  | 'loadFailureTokensRecomputed'
  | 'requestsFailedByLoad'
>;

export interface SimulateResult extends ReportedStats {
  policy: string;
  workload: SimulatePlan['workload'] & {
    gpuTokens: number;
    groups: string;
    transferThreads: number;
    backend: string;
    /** Tensor-parallel ranks (--ranks) and how they hold a block (--rank-layout). */
    ranks: number;
    rankLayout: string;
    abortRate: number;
    offload: boolean;
    blockBytes: number;
  };
  gbPerSecond: number;
  holes: number;
  mismatches: number;
  doubleStores: number;
  entriesVerified: number;
  /** Entries whose copy was still in flight after verify's bounded wait: not checked (0 normally). */
  entriesInFlight: number;
  wallSeconds: number;
  /** Tier entries resident at the end (stored chunks evicted before that cannot be verified). */
  tierUsed: number;
  /** The WebGPU adapter (--backend webgpu): on a software device (llvmpipe) the figures measure the API path, not a GPU. */
  adapter?: string;
  /** Set when the run crashed (the legacy-assert policy's engine crash). */
  crashed?: string;
  /** What close() found left over; null where a role crashed before reporting (unknown, not 0). */
  leaks?: LeakFigures;
  /** Per level (host, disk, redis): stores, hits, misses, drops, errors... */
  tiers: PerTierCounters;
  /** Chunks of store jobs whose copy failed (each failed its own job; the run went on). */
  chunksTransferFailed: number;
  /** Each worker's heap and external memory as it last sampled them, at the end of the workload. */
  memory: RuntimeMemory;
  /** True when nothing was wrong: no crash, no hole, no mismatch, no double store. */
  ok: boolean;
}

/** LeakReport with null where the figure is unknown. */
export type LeakFigures = { [K in keyof LeakReport]: number | null };

/** Marks a figure that depends on thread timing (see TIMING_NOTE). */
const TIMED = ' ~';

/** Which figures a seed does not fix: the roles race on their own threads. */
export const TIMING_NOTE =
  '~ depends on thread timing: the hasher, allocator, store and copy threads race, so the same --seed can give other counts; ' +
  'under ready-prefix, holes, byte mismatches and double stores must be 0 in every run.';

/** The result's table rows, one figure each. */
function resultRows(r: SimulateResult, p: ReturnType<typeof painter>): Array<[string, string]> {
  const zero = (n: number) => (n === 0 ? p.green('0') : p.red(String(n)));
  const rows: Array<[string, string]> = [
    ['policy', r.workload.offload ? r.policy : `${r.policy} (offloading off: baseline)`],
    ...(r.workload.ranks > 1
      ? [
          [
            'ranks',
            `${r.workload.ranks} ${r.workload.rankLayout} (a store completes on every rank's acknowledgement)`,
          ] as [string, string],
        ]
      : []),
    [
      `requests completed${TIMED}`,
      `${r.completed} of ${r.requests} (${r.aborted} aborted, ${r.preemptions} preemptions)`,
    ],
    [`chunks stored${TIMED}`, `${r.chunksStored} (copies dispatched to the tier)`],
    [`chunks deferred (passes)${TIMED}`, String(r.chunksDeferred)],
    [`  deferred, later stored${TIMED}`, String(r.chunksDeferredThenStored)],
  ];
  if (r.policy !== 'ready-prefix' || r.chunksSkippedUnready > 0) {
    // legacy-zip passes lagging chunks instead of deferring them: they are holes, not deferrals.
    rows.push([
      `chunks skipped unready${TIMED}`,
      `${r.chunksSkippedUnready} (the cursor passed them unstored)`,
    ]);
  }
  rows.push(
    [`tier allocation retries${TIMED}`, String(r.allocationRetries)],
    [`tier hits on reuse${TIMED}`, `${r.tierHits} chunks`],
    // Timed: whether a request's chunks reach the tier as one job or several decides what fits.
    [`dropped for capacity${TIMED}`, String(r.chunksDroppedForCapacity)],
    ['dropped, never ready', String(r.chunksDroppedUnready)],
    ['unreachable, not copied', String(r.chunksUnreachable)],
    [
      `bytes copied${TIMED}`,
      `${fmtBytes(r.bytesCopied)} (${fmtRate(r.gbPerSecond)} GB/s over the run, ${r.workload.blockBytes} B blocks)` +
        (r.crashed ? '; copies still in flight at the crash never completed' : ''),
    ],
    [
      'tier entries verified',
      r.crashed
        ? 'none (the crash ended the run before the check)'
        : `${r.entriesVerified} (every resident entry, byte for byte)${notVerified(r)}`,
    ],
    ['holes', zero(r.holes)],
    ['byte mismatches', zero(r.mismatches)],
    ['double stores', zero(r.doubleStores)],
    [`wall time${TIMED}`, `${r.wallSeconds.toFixed(1)} s`],
  );
  return rows;
}

export function formatResult(r: SimulateResult, color: boolean): string {
  const p = painter(color);
  const rows = resultRows(r, p);
  const lines = [p.bold('kvoff simulate')];
  if (r.crashed) {
    // The crash is the news: say it first, then what the run did before it.
    lines.push(
      p.red(`crashed: ${r.crashed}`),
      'This is the engine crash of the seeds: legacy-assert slices keys and block IDs at the token',
      'boundary and asserts equal lengths. The ready-prefix policy (the default) defers instead.',
      'Before the crash:',
      table(rows),
      p.dim(TIMING_NOTE),
    );
    return `${lines.join('\n')}\n`;
  }
  lines.push(table(rows), p.dim(TIMING_NOTE));
  const lower = (['disk', 'redis'] as const).filter(
    (t) => r.tiers[t].storedChunks + r.tiers[t].missChunks + r.tiers[t].droppedChunks > 0,
  );
  if (lower.length > 0) {
    const cell = (t: 'host' | 'disk' | 'redis') => {
      const c = r.tiers[t];
      return `${c.storedChunks} stored, ${c.hitChunks} hits, ${c.missChunks} misses, ${c.droppedChunks} dropped, ${c.errors} errors${c.circuitOpen ? ', circuit open' : ''}`;
    };
    lines.push(table((['host', ...lower] as const).map((t) => [`tier ${t}`, cell(t)])));
  }
  if (r.completed + r.aborted < r.requests) {
    lines.push(p.red(`${r.requests - r.completed - r.aborted} requests never ended.`));
  }
  if (r.holes > 0) {
    lines.push(
      p.red(`${r.holes} chunks were passed by the cursor and never stored (holes).`),
      r.policy === 'legacy-zip'
        ? 'This is legacy-zip: it stores the shorter slice but moves the cursor to the token boundary.'
        : 'This should never happen under ready-prefix: please report it.',
    );
  } else if (r.ok && !r.workload.offload) {
    lines.push(p.green('ok: offloading was off (baseline): nothing stored, nothing loaded'));
  } else if (r.ok) {
    lines.push(p.green(okLine(r)));
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Why stored chunks are not among the verified entries, from the counters
 * that say so (evictions, copies still in flight, failed copies), never
 * inferred from the difference: a copy in flight was once called evicted.
 */
function notVerified(r: SimulateResult): string {
  const parts: string[] = [];
  const evicted = r.tiers.host.evictions;
  if (evicted > 0) {
    parts.push(
      `${count(evicted, 'entry', 'entries')} evicted before the check (the tier holds ${r.tierCapacity} chunks)`,
    );
  }
  if (r.entriesInFlight > 0) {
    parts.push(`${r.entriesInFlight} still being copied when checked, not verified`);
  }
  if (r.chunksTransferFailed > 0) {
    parts.push(`${count(r.chunksTransferFailed, 'chunk')} whose copy failed, never stored`);
  }
  return parts.length > 0 ? `; ${parts.join('; ')}` : '';
}

/** The last line of a clean run: what was stored, and what was not and why, never more. */
function okLine(r: SimulateResult): string {
  const notStored: string[] = [];
  if (r.chunksDroppedForCapacity > 0) {
    notStored.push(
      `${count(r.chunksDroppedForCapacity, 'chunk')} dropped for capacity (the tier holds ${r.tierCapacity})`,
    );
  }
  if (r.chunksDroppedUnready > 0) {
    notStored.push(`${count(r.chunksDroppedUnready, 'chunk')} dropped, never ready`);
  }
  if (r.chunksTransferFailed > 0) {
    notStored.push(`${count(r.chunksTransferFailed, 'chunk')} whose copy failed`);
  }
  // Nothing verified means nothing to vouch for: say so rather than claim every (no) byte matched.
  const checked =
    r.entriesVerified === 0
      ? 'nothing was stored, so no byte was checked'
      : r.entriesInFlight > 0
        ? 'every checked byte matches its key'
        : 'every stored byte matches its key';
  if (notStored.length === 0) {
    return `ok: every chunk below the ready prefix was stored; ${checked}`;
  }
  return `ok: no holes (every chunk below the ready prefix was stored or counted); ${checked}; not stored: ${notStored.join(', ')}`;
}

/** Three significant digits: small simulated blocks give rates well below 1 GB/s. */
export function fmtRate(gbPerSecond: number): string {
  return gbPerSecond === 0 ? '0' : gbPerSecond.toPrecision(3);
}

function fmtBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}
