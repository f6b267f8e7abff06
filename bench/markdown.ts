// Markdown tables of a results file, for docs/benchmarks.md:
// `npm run bench -- --markdown bench/results/latest/kvoff-bench-quick.json`.
import type { Figure } from './lib/stats.js';
import { formatNumber } from './lib/table.js';
import { designTableNotes, designTableRows } from './design-table.js';
import type { BenchResults } from './suite.js';
import type { TargetCheck } from './target-check.js';

type Row = Record<string, string | number>;

/** The markers of the quick run's section in docs/benchmarks.md (`--quick --publish` rewrites it). */
export const QUICK_BLOCK_BEGIN =
  '<!-- bench:quick results (npm run bench -- --quick --publish rewrites them) -->';
export const QUICK_BLOCK_END = '<!-- end of bench:quick results -->';

/** A quiet machine: the 1-minute load average under this throughout the run. */
const QUIET_LOAD = 2;

/** Whether the machine was quiet, from the load averages the file holds. */
function loadSentence(res: BenchResults): string {
  const loads = [
    res.machine.loadAverage1m,
    ...Object.values(res.timings).flatMap((t) => [t.loadBefore, t.loadAfter]),
  ];
  const max = Math.max(...loads);
  return max < QUIET_LOAD
    ? `A quiet machine: the 1-minute load average stayed under ${QUIET_LOAD} (at most ${r2(max, 1)}).`
    : `A busy machine: the 1-minute load average reached ${r2(max, 1)} on ${res.machine.cores} cores, so absolute figures are unreliable and the paired ratios less so.`;
}

/** What the run shows, target by target: the count, then each miss with why and what would close it. */
function summary(targets: readonly TargetCheck[]): string[] {
  const met = targets.filter((t) => t.met);
  const missed = targets.filter((t) => !t.met);
  return [
    `**What it shows.** ${met.length} of ${targets.length} targets met${met.length ? `: ${met.map((t) => `\`${t.id}\``).join(', ')}` : ''}.${missed.length ? ' Missed:' : ''}`,
    ...(missed.length ? [''] : []),
    ...missed.map((t) => `- \`${t.id}\` (${t.missedBy}). ${t.why} To close: ${t.toClose}`),
  ];
}

function table(rows: readonly Row[]): string {
  if (rows.length === 0) return '';
  const cols = Object.keys(rows[0]!);
  const cell = (v: string | number | undefined) =>
    typeof v === 'number' ? formatNumber(v) : (v ?? '');
  return [
    `| ${cols.join(' | ')} |`,
    `| ${cols.map((c) => (rows.every((r) => typeof r[c] === 'number') ? '---:' : '---')).join(' | ')} |`,
    ...rows.map((r) => `| ${cols.map((c) => cell(r[c])).join(' | ')} |`),
  ].join('\n');
}

// NaN is stored as null in JSON (a ratio with an empty side, e.g. in --smoke).
const r2 = (x: number | null, d = 2) => (x === null ? Number.NaN : Number(x.toFixed(d)));
const iqr = (f: Figure, d = 2) =>
  `${formatNumber(r2(f.spread.p25, d))}–${formatNumber(r2(f.spread.p75, d))}`;

/** The Markdown of a results file: how it was measured, what it shows, then every table. */
export function renderMarkdown(res: BenchResults): string {
  const out: string[] = [];
  const m = res.machine;
  out.push(
    `Measured ${res.date.slice(0, 16).replace('T', ' ')} UTC, mode \`${res.mode}\`, commit \`${res.git.commit.slice(0, 12)}\`${res.git.dirty ? ' (with uncommitted changes)' : ''}; ${m.cpuModel}, ${m.cores} cores, ${Math.round(m.memoryBytes / 2 ** 30)} GiB, Node ${m.nodeVersion}. ${loadSentence(res)}`,
  );
  const load = Object.entries(res.timings)
    .map(([k, t]) => `${k} ${r2(t.loadBefore, 1)}→${r2(t.loadAfter, 1)}`)
    .join(', ');
  if (load) out.push(`Load average per benchmark (before→after): ${load}.`);
  out.push('', ...summary(res.targets));
  out.push(
    '',
    '**Targets**',
    '',
    table(
      res.targets.map((t) => ({
        target: t.target,
        measured: t.measured,
        met: t.met ? 'met' : `missed (${t.missedBy})`,
      })),
    ),
  );
  if (res.planner) {
    out.push('', '**1. Planner pass** (median ns per request-group, IQR, heap bytes per pass)', '');
    out.push(
      table(
        res.planner.rows.map((r) => ({
          R: r.requests,
          G: r.groups,
          mode: r.mode,
          'ns/request-group': r2(r.nsPerRequestGroup.median, 2),
          IQR: iqr(r.nsPerRequestGroup, 2),
          'plain-read floor (ns)': r.floorNsPerRequestGroup
            ? r2(r.floorNsPerRequestGroup.median, 2)
            : '',
          'pass (µs)': r2(r.passUs.median, 1),
          'wall (µs)': r.passWallUs ? r2(r.passWallUs.median, 1) : '',
          'heap B/pass': r2(r.heapBytesPerPass.median, 1),
        })),
      ),
    );
  }
  if (res.snapshot) {
    out.push('', `**2. Snapshots under contention** (${res.snapshot.requests} requests)`, '');
    out.push(
      table(
        res.snapshot.rows.map((r) => ({
          writers: r.writers,
          padded: r.padded ? 'yes' : 'no',
          'snapshots/s': Math.round(r.snapshotsPerSecond.median),
          'retry %': r2(r.retryRatePercent.median, 2),
          'writer publications/s': Math.round(r.writerOpsPerSecond.median),
        })),
      ),
    );
    out.push(
      '',
      table(
        res.snapshot.paddedOverUnpadded.map((r) => ({
          writers: r.writers,
          'snapshots padded/unpadded': r2(r.snapshots.median),
          'writer pubs padded/unpadded': r2(r.writerOps.median),
        })),
      ),
    );
  }
  if (res.designs) {
    out.push(
      '',
      `**3. Designs** (${res.designs.requests} requests × ${res.designs.chunksPerRequest} chunks, ${res.designs.eventsPerRun} events per run; medians, ratios paired per repeat)`,
      '',
      table(designTableRows(res.designs)),
      '',
      ...designTableNotes(res.designs),
    );
  }
  if (res.copy) {
    out.push(
      '',
      '**4. Copy bandwidth** (GB/s, pool and a memcpy on as many threads, in the same repeat)',
      '',
    );
    out.push(
      table(
        res.copy.rows.map((r) => ({
          'block KiB': r.blockKiB,
          threads: r.threads,
          'pool GB/s': r2(r.gbPerSecond.median),
          'memcpy GB/s': r2(r.baselineGbPerSecond.median),
          'pool ÷ memcpy': r2(r.ratio.median),
          IQR: iqr(r.ratio),
        })),
      ),
    );
    out.push('', 'Thread scaling (paired per repeat):', '');
    out.push(
      table(
        res.copy.scaling.map((r) => ({
          'block KiB': r.blockKiB,
          threads: `${r.fromThreads} → ${r.toThreads}`,
          pool: r2(r.poolSpeedup.median),
          memcpy: r2(r.baselineSpeedup.median),
          'pool ÷ memcpy scaling': r.poolOverBaselineScaling
            ? r2(r.poolOverBaselineScaling.median)
            : '',
        })),
      ),
    );
    const cc = res.copy.cacheControl;
    if (cc) {
      out.push(
        '',
        `Control: memcpy over a ${cc.arenaKiB} KiB arena that stays in cache (${cc.blockKiB} KiB blocks, as many bytes as a figure): 1 thread ${r2(cc.gbPerSecond1.median)} GB/s, 2 threads ${r2(cc.gbPerSecond2.median)} GB/s, 1 → 2 threads ${r2(cc.speedup.median)}×.`,
      );
    }
  }
  if (res.scenario) {
    const s = res.scenario;
    out.push('', '**5. Overflow scenario** (medians)', '');
    out.push(
      table([
        {
          run: 'offloading on',
          'wall ms': Math.round(s.offloadOn.wallMs.median),
          'chunks stored/s': Math.round(s.offloadOn.chunksStoredPerSecond.median),
          'chunks stored': s.offloadOn.chunksStored.median,
          'deferred chunk-visits': s.offloadOn.chunksDeferred.median,
          'deferred then stored': s.offloadOn.chunksDeferredThenStored.median,
          'allocation retries': s.offloadOn.allocationRetries.median,
          preemptions: s.offloadOn.preemptions.median,
          holes: s.offloadOn.holes,
        },
        // Nothing is stored with offloading off: the store's counters are not measured, not zero.
        {
          run: 'offloading off',
          'wall ms': Math.round(s.offloadOff.wallMs.median),
          'chunks stored/s': '',
          'chunks stored': '',
          'deferred chunk-visits': '',
          'deferred then stored': '',
          'allocation retries': '',
          preemptions: s.offloadOff.preemptions.median,
          holes: s.offloadOff.holes,
        },
      ]),
    );
    out.push(
      '',
      `Wall time on ÷ off: ${r2(s.wallOnOverOff.median)} (IQR ${iqr(s.wallOnOverOff)}).`,
    );
    out.push(
      '',
      '**6. Host event-loop delay** (ms beyond the 1 ms timer, medians over repeats)',
      '',
    );
    const row = (name: string, d: typeof s.eventLoop.offloadOn) => ({
      'host main thread': name,
      'p50 ms': r2(d.delayMsP50.median, 3),
      'p99 ms': r2(d.delayMsP99.median, 3),
      'max ms': r2(d.delayMsMax.median, 3),
      'loop busy %': d.busyPercent ? r2(d.busyPercent.median) : '–',
    });
    out.push(
      table([
        row('runtime, offloading on (steady state)', s.eventLoop.offloadOn),
        row('runtime, offloading off (steady state)', s.eventLoop.offloadOff),
        row('fresh runtime, first workload, on', s.eventLoop.offloadOnFresh),
        row('fresh runtime, first workload, off', s.eventLoop.offloadOffFresh),
        row('no runtime', s.eventLoop.noRuntime),
      ]),
    );
  }
  if (res.hashing) {
    const h = res.hashing;
    out.push(
      '',
      `**9. Key hashing** (CPU ns per token in the hasher thread, a ${h.tokens}-token prompt per run; medians)`,
      '',
    );
    out.push(
      table(
        h.rows.map((r) => ({
          geometry: r.geometry,
          hash: r.keyHash,
          'tokens per block': r.tokensPerHash,
          'keys per block': r2(r.keysPerHashBlock),
          'ns/token': r2(r.nsPerToken.median, 1),
          IQR: iqr(r.nsPerToken, 1),
          'SHA-256 ÷ xxHash64':
            r.keyHash === 'sha256'
              ? r2(h.sha256OverXxh64.find((x) => x.geometry === r.geometry)!.ratio.median)
              : '',
        })),
      ),
    );
  }
  if (res.webgpu) {
    const w = res.webgpu;
    out.push(
      '',
      `**10. WebGPU copies beside shared memory** (GB/s, ${w.adapter.name}, ${w.blockKiB} KiB blocks, in the same repeat). ${w.note}`,
      '',
    );
    out.push(
      table(
        w.rows.map((r) => ({
          direction: r.direction === 'gpu-to-host' ? 'GPU → host' : 'host → GPU',
          'job KiB': r.jobKiB,
          'WebGPU GB/s': r2(r.webgpuGbPerSecond.median),
          'shared-memory GB/s': r2(r.sharedMemoryGbPerSecond.median),
          'WebGPU ÷ shared': r2(r.ratio.median),
          IQR: iqr(r.ratio),
          'WebGPU job ms': r2(r.webgpuJobMs.median),
        })),
      ),
    );
    const sc = w.scenario;
    if (sc) {
      out.push(
        '',
        `The scenario on the WebGPU backend (the engine's KV on the device in both runs), paired per repeat: offloading on ${Math.round(sc.wallMsOn.median)} ms, off ${Math.round(sc.wallMsOff.median)} ms, **on ÷ off ${r2(sc.wallOnOverOff.median)}** (IQR ${iqr(sc.wallOnOverOff)}, ${sc.wallOnOverOff.samples} pairs); holes ${sc.holes}, mismatches ${sc.mismatches}, verify ${sc.verifyOk ? 'ok' : 'failed'}.`,
      );
    }
  }
  return `${out.join('\n')}\n`;
}
