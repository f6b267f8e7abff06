// `kvoff simulate`: the README's main job. Runs the built-in engine simulation
// through the real multi-threaded runtime (OffloadRuntime: scheduler, hasher,
// allocator and store workers plus a piscina transfer pool), by default at the
// seeds' overflow shape, then verifies every tier entry against its key and
// reports. Exit 0 when the run is clean, 1 when it found holes or mismatches
// or the legacy-assert policy crashed, 2 for bad options.
import { addLoadOptions } from './load-options.js';
import { accessSync, constants, statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Command } from 'commander';
import { InvalidArgumentError, KvoffError, LoadFailedError } from '../errors.js';
import { STORE_POLICIES } from '../ready.js';
import { renderReport } from '../report/render.js';
import { defaultWorkload } from '../runtime/defaults.js';
import { OffloadRuntime } from '../runtime/runtime.js';
import type { RuntimeStats } from '../runtime/runtime.js';
import { buildReportData } from './simulate-report.js';
import { formatResult } from './simulate-result.js';
import type { LeakFigures, SimulateResult } from './simulate-result.js';
import { TRANSFER_THREADS_MAX } from './options.js';
import {
  BLOCK_BYTES_MEANING,
  GROUP_PRESETS,
  SIMULATE_DEFAULTS,
  parseSimulateOptions,
} from './simulate-options.js';
import type { SimulatePlan, SimulateRawOptions } from './simulate-options.js';
import { colorAllowed, progress } from './term.js';
import { addTierOptions } from './tier-options.js';
import { INSECURE_TIER_WARNING, TierWatch } from './tier-watch.js';
import { addEventOptions } from './event-options.js';
import { addTraceOptions, traceAction } from './simulate-trace.js';
import type { TraceRawOptions } from './simulate-trace.js';

/** How often the progress display is refreshed. */
const PROGRESS_TICK_MS = 250;

export interface SimulateHooks {
  /** Called every PROGRESS_TICK_MS while the workload runs. */
  onProgress?(done: number, total: number, stats: RuntimeStats): void;
  /** A line about a lower tier's health (src/commands/tier-watch.ts), while it runs. */
  onTierWarning?(line: string): void;
}

/** Runs one simulation to the end and returns its result; writes the report if asked. */
export async function runSimulate(
  plan: SimulatePlan,
  hooks: SimulateHooks = {},
): Promise<SimulateResult> {
  const t0 = performance.now();
  const runtime = await startSimulateRuntime(plan);
  const warn = hooks.onTierWarning;
  const watch =
    warn && plan.tiers ? new TierWatch(() => runtime.stats().tiers, warn).start() : undefined;
  const requests = defaultWorkload(plan.workload);
  let done = 0;
  let crashed: string | undefined;
  const ticker = setInterval(
    () => hooks.onProgress?.(done, requests.length, runtime.stats()),
    PROGRESS_TICK_MS,
  );
  const tRun = performance.now();
  try {
    await Promise.all(
      requests.map((r) =>
        runtime.submit(r).then(
          () => {
            done += 1;
          },
          (err: unknown) => {
            // --load-failure-policy fail: that request failed, counted in stats(); the run goes on.
            if (!(err instanceof LoadFailedError)) throw err;
            done += 1;
          },
        ),
      ),
    );
  } catch (err) {
    if (!isLegacyCrash(plan, err)) {
      clearInterval(ticker);
      watch?.stop();
      await runtime.close().catch(() => undefined);
      throw err;
    }
    crashed = err instanceof Error ? err.message : String(err);
  }
  const runSeconds = (performance.now() - tRun) / 1000;
  clearInterval(ticker);
  hooks.onProgress?.(done, requests.length, runtime.stats());

  let verify = { mismatches: 0, holes: 0, doubleStores: 0, entriesChecked: 0, entriesInFlight: 0 };
  if (crashed === undefined) verify = await runtime.verify();
  const stats = runtime.stats();
  watch?.stop();
  await runtime.close().catch((err: unknown) => {
    // A crashed runtime already stopped its workers; anything else is real.
    if (crashed === undefined) throw err;
  });
  // After close: a crashed store's last traces (up to the crash) have arrived by now.
  const traces = runtime.trace();
  // After close too: the lower levels' writes still queued land (or are dropped) during close.
  const tiers = runtime.stats().tiers;
  const wallSeconds = (performance.now() - t0) / 1000;
  // One figure, the store's chunk ledger: verify() reads it once every request
  // drained; after a crash (no verify) the last figure the store published.
  const holes = crashed === undefined ? verify.holes : stats.holes;
  const result = resultOf(
    plan,
    requests.length,
    stats,
    verify,
    holes,
    tiers,
    runSeconds,
    wallSeconds,
  );
  // The device the figures came from (a software device measures the API path, not a GPU).
  if (runtime.webgpuAdapter) result.adapter = runtime.webgpuAdapter.name;
  if (crashed !== undefined) result.crashed = crashed;
  const leaks = runtime.leakReport();
  // The runtime says -1 when a role's final report never came (it crashed): unknown, so null.
  if (leaks) {
    result.leaks = Object.fromEntries(
      Object.entries(leaks).map(([k, v]) => [k, v < 0 ? null : v]),
    ) as LeakFigures;
  }
  result.ok =
    crashed === undefined && holes === 0 && result.mismatches === 0 && result.doubleStores === 0;
  if (plan.report) {
    writeFileSync(plan.report, renderReport(buildReportData(plan, result, traces, runtime.config)));
  }
  return result;
}

/** The runtime a simulation runs, from its plan. */
function startSimulateRuntime(plan: SimulatePlan): Promise<OffloadRuntime> {
  return OffloadRuntime.start({
    config: plan.config,
    policy: plan.policy,
    transferThreads: plan.transferThreads,
    transferBackend: plan.backend,
    lag: plan.lag,
    simulator: {
      seed: plan.seed,
      abortQueuedRate: plan.abortRate,
      abortRunningRate: plan.abortRate,
      // The baseline: the store role runs its passes but nothing is offloadable or loaded.
      ...(plan.offload ? {} : { offload: false, loadFromTier: false }),
    },
    traceSlots: plan.traceRequests,
    ...(plan.tiers ? { tiers: plan.tiers } : {}),
    ...(plan.events ? { events: plan.events } : {}),
    ...(plan.cache ? { cache: plan.cache } : {}),
    ...(plan.loadFailurePolicy ? { loadFailurePolicy: plan.loadFailurePolicy } : {}),
  });
}

/** A run's figures as the result reports them (ok is decided by the caller). */
function resultOf(
  plan: SimulatePlan,
  requests: number,
  stats: RuntimeStats,
  verify: { doubleStores: number; entriesChecked: number; entriesInFlight: number },
  holes: number,
  tiers: RuntimeStats['tiers'],
  runSeconds: number,
  wallSeconds: number,
): SimulateResult {
  return {
    policy: plan.policy,
    workload: {
      ...plan.workload,
      gpuTokens: plan.gpuTokens,
      groups: plan.groupsName,
      transferThreads: plan.transferThreads,
      backend: plan.backend,
      ranks: plan.config.ranks ?? 1,
      rankLayout: plan.config.rankLayout ?? 'sharded',
      abortRate: plan.abortRate,
      offload: plan.offload,
      blockBytes: plan.blockBytes,
    },
    requests,
    completed: stats.completed,
    aborted: stats.aborted,
    preemptions: stats.preemptions,
    chunksStored: stats.chunksStored,
    chunksDeferred: stats.chunksDeferred,
    chunksSkippedUnready: stats.chunksSkippedUnready,
    chunksDeferredThenStored: stats.chunksDeferredThenStored,
    allocationRetries: stats.allocationRetries,
    tierHits: stats.tierHits,
    chunksDroppedForCapacity: stats.chunksDroppedForCapacity,
    chunksDroppedUnready: stats.chunksDroppedUnready,
    chunksUnreachable: stats.chunksUnreachable,
    snapshotRetries: stats.snapshotRetries,
    bytesCopied: stats.bytesCopied,
    gbPerSecond: runSeconds > 0 ? stats.bytesCopied / runSeconds / 1e9 : 0,
    holes,
    mismatches: stats.mismatches,
    doubleStores: verify.doubleStores,
    entriesVerified: verify.entriesChecked,
    entriesInFlight: verify.entriesInFlight,
    tierUsed: stats.tierUsed,
    tierCapacity: stats.tierCapacity,
    wallSeconds: Math.round(wallSeconds * 1000) / 1000,
    tiers,
    chunksTransferFailed: stats.chunksTransferFailed,
    loadFailures: stats.loadFailures,
    loadFailureTokensRecomputed: stats.loadFailureTokensRecomputed,
    requestsFailedByLoad: stats.requestsFailedByLoad,
    memory: stats.memory,
    ok: false,
  };
}

/** legacy-assert is expected to crash: its LegacyAssertionError reaches main as a failed store worker. */
function isLegacyCrash(plan: SimulatePlan, err: unknown): boolean {
  if (plan.policy !== 'legacy-assert' || !(err instanceof KvoffError)) return false;
  return err.code === 'KVOFF_LEGACY_ASSERTION' || /legacy-assert/.test(err.message);
}

/** Fails before the run, with exit 2, when the report could not be written. */
function checkReportPath(path: string): void {
  const dir = dirname(resolve(path));
  try {
    if (!statSync(dir).isDirectory()) throw new Error('not a directory');
    accessSync(dir, constants.W_OK);
  } catch {
    throw new InvalidArgumentError('--report', `cannot write into ${dirname(path)}`);
  }
}

export function registerSimulate(program: Command): void {
  const d = SIMULATE_DEFAULTS;
  const cmd = program
    .command('simulate')
    .description(
      'run the built-in engine simulation through the multi-threaded runtime and verify every stored byte\n' +
        `(defaults: the seeds' overflow shape, ${d.requests} requests of ~${d.promptTokens} prompt tokens against a ${d.gpuTokens}-token GPU pool)`,
    )
    .option('--requests <n>', 'requests submitted at once', String(d.requests))
    .option(
      '--prompt-tokens <n>',
      'prompt length per request (each varies by up to ±4%)',
      String(d.promptTokens),
    )
    .option(
      '--gpu-tokens <n>',
      'GPU KV pool size in tokens (less than the total demand forces preemption)',
      String(d.gpuTokens),
    )
    .option(
      '--groups <spec>',
      `KV groups: ${Object.keys(GROUP_PRESETS).join(', ')}, or kind:tokensPerBlock[:windowTokens][:eagle],...`,
      d.groups,
    )
    .option('--blocks-per-chunk <n>', 'GPU blocks per offloaded chunk', String(d.blocksPerChunk))
    .option('--tier-chunks <n>', 'host tier capacity in chunks', String(d.tierChunks))
    .option('--decode-tokens <n>', 'decode tokens per request', String(d.decodeTokens))
    .option(
      '--prefixes <n>',
      'distinct shared prompt prefixes (requests cycle over them: tier hits on reuse)',
      String(d.prefixes),
    )
    .option(
      '--shared-prefix-tokens <n>',
      "tokens each request shares with its prefix (default: 30% of the prompt, distinct prompts behind a common head; a request's prefixId alone, over HTTP or submit(), shares its whole prompt)",
    )
    .option(
      '--lag-hashes-per-wake <n>',
      'hasher lag: hash blocks published per request per wake-up (runtime default 64)',
    )
    .option(
      '--lag-publish-delay-ms <ms>',
      'allocator lag: delay before block IDs are published (runtime default 1)',
    )
    .option('--lag-jitter-ms <ms>', 'random extra lag on hasher and allocator (runtime default 1)')
    .option(
      '--abort-rate <p>',
      'chance per engine step that one queued and one running request are aborted (0: none; the embedding API aborts none)',
      String(d.abortRate),
    );
  addRunOptions(cmd);
  addLoadOptions(addEventOptions(addTraceOptions(addTierOptions(cmd))))
    .addHelpText(
      'after',
      '\nExit codes: 0 clean run; 1 holes, byte mismatches or a legacy-assert crash; 2 bad options.\n' +
        'Examples:\n  kvoff simulate\n  kvoff simulate --requests 4 --prompt-tokens 8192 --gpu-tokens 65536 --json\n' +
        '  kvoff simulate --policy legacy-zip      # completes, reports holes, exit 1\n' +
        '  kvoff simulate --report out.html\n' +
        '  kvoff simulate --trace conversation_trace.jsonl --trace-mode cache --capacity-tokens 3000000 --json',
    )
    .action(simulateAction);
}

/** simulate's options of how the run runs: policy, threads, backend, block bytes, ranks, seed, report. */
function addRunOptions(cmd: Command): void {
  const d = SIMULATE_DEFAULTS;
  cmd
    .option('--no-offload', 'switch offloading off (the baseline: nothing stored, nothing loaded)')
    .option('--policy <name>', `store policy: ${STORE_POLICIES.join(', ')}`, 'ready-prefix')
    .option(
      '--transfer-threads <n>',
      `piscina threads that copy chunks (1 to ${TRANSFER_THREADS_MAX})`,
      String(d.transferThreads),
    )
    .option(
      '--backend <name>',
      'where the GPU KV lives and what copies it: shared-memory, or webgpu (a WebGPU device; needs the optional webgpu package and a Vulkan driver)',
      'shared-memory',
    )
    .option('--block-bytes <n>', BLOCK_BYTES_MEANING, String(d.blockBytes))
    .option(
      '--ranks <n>',
      'tensor-parallel ranks: each copies its shard of every block; a store completes on every rank',
      '1',
    )
    .option(
      '--rank-layout <name>',
      'sharded (each rank holds a slice of each block) or replicated (rank 0 writes, the others acknowledge)',
      'sharded',
    )
    .option('--seed <n>', 'seed of the workload, the engine and the lag', String(d.seed))
    .option(
      '--report <file.html>',
      'write a self-contained HTML report (timelines of a few traced requests)',
    )
    .option('--trace-requests <n>', 'requests traced for --report', String(d.traceRequests))
    .option('--json', 'print one JSON object instead of the text report');
}

/** `kvoff simulate`'s action: a trace replay, or one simulation with its result printed. */
async function simulateAction(
  raw: SimulateRawOptions & TraceRawOptions,
  command: Command,
): Promise<void> {
  if (raw.trace !== undefined) {
    await traceAction(raw, command);
    return;
  }
  const plan = parseSimulateOptions(raw, (name) => command.getOptionValueSource(name) === 'cli');
  if (plan.report) checkReportPath(plan.report);
  if (plan.tiers?.redis?.insecure === true) process.stderr.write(`${INSECURE_TIER_WARNING}\n`);
  const color = colorAllowed(process.stdout);
  const bar = progress(process.stderr, plan.workload.requests, 'simulate', {
    quiet: plan.json && !process.stderr.isTTY,
  });
  let result: SimulateResult;
  try {
    result = await runSimulate(plan, {
      onTierWarning: (line) => process.stderr.write(`${line}\n`),
      onProgress: (doneCount, _total, s) =>
        bar.update(
          doneCount,
          `requests · ${s.chunksStored} stored · ${s.chunksDeferred} deferred · ${s.preemptions} preemptions`,
        ),
    });
  } finally {
    bar.stop();
  }
  if (plan.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    process.stdout.write(formatResult(result, color));
    if (plan.report) process.stdout.write(`report written to ${plan.report}\n`);
  }
  if (!result.ok) process.exitCode = 1;
}
