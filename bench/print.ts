// The terminal tables of each benchmark (medians, with the interquartile range
// where noise matters). The JSON file has every figure with its full spread.
import type { CopyResults } from './copy.js';
import type { DesignResults } from './designs/run.js';
import type { HashingResults } from './hashing.js';
import type { PlannerResults } from './planner.js';
import type { ScenarioResults } from './scenario.js';
import type { SnapshotResults } from './snapshot.js';
import type { WebGpuResults } from './webgpu.js';
import type { Figure } from './lib/stats.js';
import { formatNumber, printTable } from './lib/table.js';
import { designLabel, designTableNotes, designTableRows } from './design-table.js';
import type { TargetCheck } from './targets.js';

const iqr = (f: Figure) => `${formatNumber(f.spread.p25)}..${formatNumber(f.spread.p75)}`;
const round = (x: number, digits = 1) => Number(x.toFixed(digits));

export function printPlanner(p: PlannerResults): void {
  printTable(
    '1. Planner pass (StorePlanner.pass): ns per request-group, heap bytes per pass',
    p.rows.map((r) => ({
      R: r.requests,
      G: r.groups,
      mode: r.mode,
      'ns/req-group': round(r.nsPerRequestGroup.median, 2),
      'IQR (ns)': iqr(r.nsPerRequestGroup),
      'floor ns': r.floorNsPerRequestGroup ? round(r.floorNsPerRequestGroup.median, 2) : '',
      'pass (us)': round(r.passUs.median),
      'wall (us)': r.passWallUs ? round(r.passWallUs.median) : '',
      'heap B/pass': round(r.heapBytesPerPass.median),
      passes: r.passes,
    })),
  );
  const w = p.writerCost;
  printTable('   writer side of the dirty bitmap (ns per call, one thread)', [
    {
      markDirty: round(w.markDirtyNs.median, 2),
      'Atomics.store': round(w.atomicStoreNs.median, 2),
      'progress()': round(w.progressNs.median, 1),
      'markDirty share': `${round(100 * w.markDirtyShareOfProgress.median, 1)}%`,
    },
  ]);
}

export function printSnapshot(s: SnapshotResults): void {
  printTable(
    `2. Snapshots under contention (${s.requests} requests, ${s.durationMsPerRepeat} ms per repeat)`,
    s.rows.map((r) => ({
      writers: r.writers,
      padded: r.padded ? 'yes' : 'no',
      'snapshots/s': Math.round(r.snapshotsPerSecond.median),
      IQR: iqr(r.snapshotsPerSecond),
      'retry %': round(r.retryRatePercent.median, 3),
      'gave up/s': Math.round(r.givenUpPerSecond.median),
      'writer pubs/s': Math.round(r.writerOpsPerSecond.median),
    })),
  );
  printTable(
    '   padded / unpadded (paired per repeat; > 1: padding helps)',
    s.paddedOverUnpadded.map((r) => ({
      writers: r.writers,
      snapshots: round(r.snapshots.median, 2),
      'writer pubs': round(r.writerOps.median, 2),
    })),
  );
}

export function printDesigns(d: DesignResults): void {
  printTable(
    `3. Designs on one event stream (${d.requests} requests x ${d.chunksPerRequest} chunks, ${d.eventsPerRun} events per run)`,
    designTableRows(d),
  );
  for (const line of designTableNotes(d)) process.stdout.write(`   ${line}\n`);
  for (const [name, text] of Object.entries(d.designs))
    process.stdout.write(`   ${designLabel(name)}: ${text}\n`);
  process.stdout.write('\n');
}

export function printCopy(c: CopyResults): void {
  printTable(
    `4. Copy bandwidth: pool vs memcpy on as many threads (arena ${c.arenaMiB} MiB, ${Math.round(c.bytesPerMeasurement / 2 ** 20)} MiB per measurement)`,
    c.rows.map((r) => ({
      'block KiB': r.blockKiB,
      threads: r.threads,
      'job KiB': r.jobKiB,
      'pool GB/s': round(r.gbPerSecond.median, 2),
      'memcpy GB/s': round(r.baselineGbPerSecond.median, 2),
      'pool / memcpy': round(r.ratio.median, 2),
      'ratio IQR': iqr(r.ratio),
    })),
  );
  printTable(
    '   thread scaling (paired per repeat)',
    c.scaling.map((r) => ({
      'block KiB': r.blockKiB,
      threads: `${r.fromThreads} -> ${r.toThreads}`,
      pool: round(r.poolSpeedup.median, 2),
      memcpy: round(r.baselineSpeedup.median, 2),
      'pool / memcpy scaling': round(r.poolOverBaselineScaling.median, 2),
    })),
  );
  const cc = c.cacheControl;
  if (cc) {
    process.stdout.write(
      `   control: memcpy over a ${cc.arenaKiB} KiB arena (in cache), ${cc.blockKiB} KiB blocks: 1 thread ${round(cc.gbPerSecond1.median, 2)} GB/s, 2 threads ${round(cc.gbPerSecond2.median, 2)} GB/s, 1 -> 2 threads ${round(cc.speedup.median, 2)}x\n\n`,
    );
  }
}

export function printWebGpu(w: WebGpuResults): void {
  printTable(
    `10. WebGPU copies beside shared memory (${w.adapter.name}; ${w.blockKiB} KiB blocks, ${Math.round(w.bytesPerMeasurement / 2 ** 20)} MiB per measurement)`,
    w.rows.map((r) => ({
      direction: r.direction,
      'job KiB': r.jobKiB,
      'WebGPU GB/s': round(r.webgpuGbPerSecond.median, 2),
      'shared-memory GB/s': round(r.sharedMemoryGbPerSecond.median, 2),
      'WebGPU / shared': round(r.ratio.median, 2),
      'ratio IQR': iqr(r.ratio),
      'WebGPU job ms': round(r.webgpuJobMs.median, 2),
    })),
  );
  process.stdout.write(`   ${w.note}\n\n`);
  const sc = w.scenario;
  if (sc) {
    process.stdout.write(
      `   the scenario on the WebGPU backend: offloading on ${Math.round(sc.wallMsOn.median)} ms, off ${Math.round(sc.wallMsOff.median)} ms, on / off ${round(sc.wallOnOverOff.median, 2)} (IQR ${iqr(sc.wallOnOverOff)}); holes ${sc.holes}, mismatches ${sc.mismatches}, verify ${sc.verifyOk ? 'ok' : 'FAILED'}\n\n`,
    );
  }
}

export function printScenario(s: ScenarioResults): void {
  const on = s.offloadOn;
  const off = s.offloadOff;
  printTable(
    `5. Overflow scenario (${s.workload.requests} requests x ~${s.workload.promptTokensApprox} tokens, ${s.workload.gpuPoolTokens}-token GPU pool)`,
    [
      {
        run: 'offloading on',
        'wall ms': Math.round(on.wallMs.median),
        'chunks stored/s': Math.round(on.chunksStoredPerSecond.median),
        stored: on.chunksStored.median,
        'deferred (chunk-visits)': on.chunksDeferred.median,
        'deferred then stored': on.chunksDeferredThenStored.median,
        'alloc retries': on.allocationRetries.median,
        preemptions: on.preemptions.median,
        holes: on.holes,
      },
      {
        run: 'offloading off',
        'wall ms': Math.round(off.wallMs.median),
        'chunks stored/s': '',
        stored: '',
        'deferred (chunk-visits)': '',
        'deferred then stored': '',
        'alloc retries': '',
        preemptions: off.preemptions.median,
        holes: off.holes,
      },
    ],
  );
  process.stdout.write(
    `   wall on / off: ${round(s.wallOnOverOff.median, 2)} (paired per repeat)\n\n`,
  );
  const row = (name: string, d: ScenarioResults['eventLoop']['offloadOn']) => ({
    'host main thread': name,
    'p50 ms': round(d.delayMsP50.median, 3),
    'p99 ms': round(d.delayMsP99.median, 3),
    'max ms': round(d.delayMsMax.median, 3),
    'loop busy %': d.busyPercent ? round(d.busyPercent.median, 2) : '-',
  });
  printTable('6. Event-loop delay of the embedding main thread (beyond the 1 ms timer)', [
    row('runtime, offloading on (steady state)', s.eventLoop.offloadOn),
    row('runtime, offloading off (steady state)', s.eventLoop.offloadOff),
    row('fresh runtime, first workload, on', s.eventLoop.offloadOnFresh),
    row('fresh runtime, first workload, off', s.eventLoop.offloadOffFresh),
    row('no runtime (machine alone)', s.eventLoop.noRuntime),
  ]);
}

export function printHashing(h: HashingResults): void {
  printTable(
    `9. Key hashing in the hasher thread: CPU ns per token (a ${h.tokens}-token prompt per run)`,
    h.rows.map((r) => ({
      geometry: r.geometry,
      hash: r.keyHash,
      'tokens/block': r.tokensPerHash,
      'keys/block': round(r.keysPerHashBlock, 2),
      'ns/token': round(r.nsPerToken.median, 1),
      IQR: iqr(r.nsPerToken),
    })),
  );
  printTable(
    '   SHA-256 ÷ xxHash64 (paired per repeat)',
    h.sha256OverXxh64.map((r) => ({ geometry: r.geometry, ratio: round(r.ratio.median, 2) })),
  );
}

export function printTargets(targets: readonly TargetCheck[]): void {
  printTable(
    'Targets',
    targets.map((t) => ({ target: t.target, measured: t.measured, met: t.met ? 'met' : 'MISSED' })),
  );
  for (const t of targets.filter((x) => !x.met)) {
    process.stdout.write(
      `   ${t.id}: missed by ${t.missedBy}\n     why: ${t.why}\n     to close: ${t.toClose}\n`,
    );
  }
  process.stdout.write('\n');
}
