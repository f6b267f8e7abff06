// From a finished simulation to the report's data object: the summary rows
// and, per traced request, its passes regrouped by KV group.
import type { Config } from '../config.js';
import type { ReportData, ReportPass, ReportRequestTrace } from '../report/data.js';
import type { RequestTrace } from '../runtime/runtime.js';
import type { SimulatePlan } from './simulate-options.js';
import { TIMING_NOTE, fmtRate } from './simulate-result.js';
import type { SimulateResult } from './simulate-result.js';

export function buildReportData(
  plan: SimulatePlan,
  r: SimulateResult,
  traces: readonly RequestTrace[],
  config: Config,
): ReportData {
  return {
    title: `kvoff simulate · ${r.policy}`,
    generatedAt: new Date().toISOString(),
    policy: r.policy,
    workload: {
      requests: r.requests,
      promptTokens: plan.workload.promptTokens,
      gpuTokens: plan.gpuTokens,
      groups: plan.groupsName,
      decodeTokens: plan.workload.maxDecodeTokens,
      prefixes: plan.workload.prefixes,
      transferThreads: plan.transferThreads,
      abortRate: r.workload.abortRate,
      seed: plan.seed,
    },
    summary: [
      { label: 'requests completed', value: `${r.completed}/${r.requests}` },
      { label: 'preemptions', value: String(r.preemptions) },
      { label: 'chunks stored ~', value: String(r.chunksStored) },
      { label: 'chunks deferred (passes) ~', value: String(r.chunksDeferred) },
      { label: 'deferred, later stored ~', value: String(r.chunksDeferredThenStored) },
      ...(r.policy !== 'ready-prefix' || r.chunksSkippedUnready > 0
        ? [
            {
              label: 'chunks skipped unready (never stored) ~',
              value: String(r.chunksSkippedUnready),
              bad: r.chunksSkippedUnready > 0,
            },
          ]
        : []),
      { label: 'tier allocation retries ~', value: String(r.allocationRetries) },
      { label: 'tier hits on reuse ~', value: String(r.tierHits) },
      {
        label: r.crashed ? 'tier entries verified (none: crashed)' : 'tier entries verified',
        value: String(r.entriesVerified),
      },
      ...(r.chunksStored > r.entriesVerified && !r.crashed
        ? [
            {
              label: 'stored, evicted before the check (unverifiable)',
              value: String(r.chunksStored - r.entriesVerified),
            },
          ]
        : []),
      { label: `GB/s copied ~ (${r.workload.blockBytes} B blocks)`, value: fmtRate(r.gbPerSecond) },
      { label: 'holes', value: String(r.holes), bad: r.holes > 0 },
      { label: 'byte mismatches', value: String(r.mismatches), bad: r.mismatches > 0 },
      { label: 'wall time', value: `${r.wallSeconds.toFixed(1)} s` },
      ...(r.crashed ? [{ label: 'crashed', value: r.crashed, bad: true }] : []),
    ],
    note: TIMING_NOTE,
    requests: [...traces]
      .sort((a, b) => a.requestId - b.requestId)
      .map((t) => toRequestTrace(t, config)),
  };
}

function toRequestTrace(t: RequestTrace, config: Config): ReportRequestTrace {
  const groups = config.groups.map((g) => ({
    group: g.index,
    kind: g.kind + (g.eagle ? ' (EAGLE)' : ''),
    tokensPerChunk: g.tokensPerChunk,
    passes: [] as ReportPass[],
  }));
  for (const p of t.passes) {
    const g = groups[p.group];
    if (g === undefined) continue;
    g.passes.push({
      tMs: p.atMs,
      generation: p.generation,
      tokenChunks: p.tokenChunks,
      keys: p.keys,
      blockChunks: p.blockChunks,
      ready: p.ready,
      cursorBefore: p.cursorBefore,
      cursorAfter: p.cursor,
      // What the planner reported for the pass (the chunk ledger's feed), not recomputed.
      stored: p.stored,
      deferred: p.deferred,
      skipped: p.skipped,
    });
  }
  // A trace still 'running' at the end is a request the store saw until it crashed.
  const status = t.status === 'running' ? 'running when the store crashed' : t.status;
  return { requestId: t.requestId, status, promptTokens: t.promptTokens, groups };
}
