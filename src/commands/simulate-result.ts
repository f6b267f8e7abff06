// The result of one `kvoff simulate` run and its text form: what runSimulate
// returns, prints, writes with --json and hands to the HTML report.
import type { LeakReport, RuntimeStats } from '../runtime/runtime.js';
import type { RuntimeMemory } from '../runtime/memory.js';
import type { PerTierCounters } from '../tier/tier-stats.js';
import type { SimulatePlan } from './simulate-options.js';
import { painter, table } from './term.js';

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
>;

export interface SimulateResult extends ReportedStats {
  policy: string;
  workload: SimulatePlan['workload'] & {
    gpuTokens: number;
    groups: string;
    transferThreads: number;
    abortRate: number;
    offload: boolean;
    blockBytes: number;
  };
  gbPerSecond: number;
  holes: number;
  mismatches: number;
  doubleStores: number;
  entriesVerified: number;
  wallSeconds: number;
  /** Tier entries resident at the end (stored chunks evicted before that cannot be verified). */
  tierUsed: number;
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

export function formatResult(r: SimulateResult, color: boolean): string {
  const p = painter(color);
  const zero = (n: number) => (n === 0 ? p.green('0') : p.red(String(n)));
  const unverified = r.chunksStored - r.entriesVerified;
  const rows: Array<[string, string]> = [
    ['policy', r.workload.offload ? r.policy : `${r.policy} (offloading off: baseline)`],
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
    ['dropped for capacity', String(r.chunksDroppedForCapacity)],
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
        : `${r.entriesVerified} (every resident entry, byte for byte)` +
          (unverified > 0
            ? `; ${unverified} stored chunks were evicted before the check and cannot be verified`
            : ''),
    ],
    ['holes', zero(r.holes)],
    ['byte mismatches', zero(r.mismatches)],
    ['double stores', zero(r.doubleStores)],
    [`wall time${TIMED}`, `${r.wallSeconds.toFixed(1)} s`],
  );
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
    lines.push(
      p.green(
        'ok: every chunk below the ready prefix was stored; every stored byte matches its key',
      ),
    );
  }
  return `${lines.join('\n')}\n`;
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
