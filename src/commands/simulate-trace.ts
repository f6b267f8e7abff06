// `kvoff simulate --trace FILE`: a request trace of Mooncake's shape replayed
// through kvoff, in one of two modes. `threads` (the default) runs it through
// the threaded runtime with its real tiers; `cache` runs the host tier's
// index and cache policy alone (no threads, no bytes), fast enough for
// capacity sweeps over whole traces. Both print the token hit ratio.
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { loadHashing } from '../hashing.js';
import { DEFAULT_SEED } from '../runtime/defaults.js';
import { replayCache } from '../trace/cache-replay.js';
import type { CacheReplayResult } from '../trace/cache-replay.js';
import { replayThreaded, traceRuntimeConfig } from '../trace/threaded-replay.js';
import type { ThreadedReplayResult } from '../trace/threaded-replay.js';
import { readTrace } from '../trace/trace.js';
import type { Trace } from '../trace/trace.js';
import { parseCachePolicy, STORE_THRESHOLD_MAX } from '../tier/policy/index.js';
import type { CachePolicyName } from '../tier/policy/index.js';
import type { TiersOptions } from '../tier/cascade.js';
import {
  TRANSFER_THREADS_MAX,
  intOption,
  intOptionOr,
  namedOption,
  numberOption,
} from './options.js';
import { parseGroups } from './simulate-options.js';
import type { SimulateRawOptions } from './simulate-options.js';
import { colorAllowed, painter, progress, table } from './term.js';
import { parseNamespaceOptions, parseTierOptions } from './tier-options.js';
import { INSECURE_TIER_WARNING } from './tier-watch.js';
import type { GroupInput } from '../config.js';
import type { NamespaceInput } from '../identity.js';

const TRACE_MODES = ['threads', 'cache'] as const;
type TraceMode = (typeof TRACE_MODES)[number];

/** What --trace changes: a full-attention model with 512-token chunks and small blocks. */
const TRACE_DEFAULTS = {
  groups: 'full',
  blocksPerChunk: 32,
  blockBytes: 8,
  window: 32,
  gpuTokens: 611_840,
} as const;

/** The trace options as commander gives them. */
export interface TraceRawOptions {
  trace?: string;
  traceMode?: string;
  traceLimit?: string;
  capacityTokens?: string;
  cachePolicy?: string;
  storeThreshold?: string;
  speed?: string;
  traceWindow?: string;
}

/** Options of `kvoff simulate` that a trace replay does not use: refused when given. */
const NOT_WITH_TRACE: ReadonlyArray<[keyof SimulateRawOptions, string]> = [
  ['requests', '--requests'],
  ['promptTokens', '--prompt-tokens'],
  ['decodeTokens', '--decode-tokens'],
  ['prefixes', '--prefixes'],
  ['sharedPrefixTokens', '--shared-prefix-tokens'],
  ['tierChunks', '--tier-chunks'],
  ['lagHashesPerWake', '--lag-hashes-per-wake'],
  ['lagPublishDelayMs', '--lag-publish-delay-ms'],
  ['lagJitterMs', '--lag-jitter-ms'],
  ['abortRate', '--abort-rate'],
  ['offload', '--no-offload'],
  ['policy', '--policy'],
  ['report', '--report'],
  ['traceRequests', '--trace-requests'],
];

/** Options only a threaded replay uses: refused with --trace-mode cache. */
const THREADS_ONLY: ReadonlyArray<[string, string]> = [
  ['speed', '--speed'],
  ['traceWindow', '--trace-window'],
  ['transferThreads', '--transfer-threads'],
  ['blockBytes', '--block-bytes'],
  ['gpuTokens', '--gpu-tokens'],
  ['disk', '--disk'],
  ['redis', '--redis'],
];

export interface TracePlan {
  file: string;
  mode: TraceMode;
  limit?: number;
  groups: GroupInput[];
  blocksPerChunk: number;
  capacityTokens: number;
  policy: CachePolicyName;
  storeThreshold: number;
  blockBytes: number;
  gpuTokens: number;
  window: number;
  speed?: number;
  transferThreads: number;
  seed: number;
  tiers?: TiersOptions;
  /** The simulated engine's model and adapter (--model ...): every key and lower-tier name. */
  namespace: NamespaceInput;
  json: boolean;
}

/** The trace file and replay mode, after refusing options the mode does not use. */
function traceFileAndMode(
  raw: SimulateRawOptions & TraceRawOptions,
  given: (name: string) => boolean,
): { file: string; mode: TraceMode } {
  const file = raw.trace ?? '';
  if (file.trim() === '') throw new InvalidArgumentError('--trace', 'needs a file');
  const modeName = raw.traceMode ?? 'threads';
  if (!(TRACE_MODES as readonly string[]).includes(modeName)) {
    throw new InvalidArgumentError('--trace-mode', `must be one of ${TRACE_MODES.join(', ')}`);
  }
  const mode = modeName as TraceMode;
  for (const [key, flag] of NOT_WITH_TRACE) {
    if (given(key)) throw new InvalidArgumentError(flag, 'is not used by a trace replay (--trace)');
  }
  if (mode === 'cache') {
    for (const [key, flag] of THREADS_ONLY) {
      if (given(key)) throw new InvalidArgumentError(flag, 'is not used by --trace-mode cache');
    }
  }
  return { file, mode };
}

/** The replay's KV groups: the trace default unless given; the cache mode models one full-attention group. */
function traceGroups(
  raw: SimulateRawOptions & TraceRawOptions,
  given: (name: string) => boolean,
  mode: TraceMode,
): ReturnType<typeof parseGroups> {
  const groups = parseGroups(
    given('groups') ? (raw.groups ?? TRACE_DEFAULTS.groups) : TRACE_DEFAULTS.groups,
  );
  if (mode === 'cache' && (groups.length !== 1 || groups[0]!.kind !== 'full')) {
    throw new InvalidArgumentError(
      '--groups',
      'the cache mode models one full-attention group (e.g. full or full:16)',
    );
  }
  return groups;
}

/**
 * The plan of a trace replay. `given(name)` says whether the user set an
 * option (commander's source is 'cli'), so defaults that --trace changes
 * apply only where the user did not choose.
 */
export function parseTraceOptions(
  raw: SimulateRawOptions & TraceRawOptions,
  given: (name: string) => boolean,
): TracePlan {
  const { file, mode } = traceFileAndMode(raw, given);
  const groups = traceGroups(raw, given, mode);
  const blocksPerChunk = intOptionOr(
    '--blocks-per-chunk',
    given('blocksPerChunk') ? raw.blocksPerChunk : undefined,
    1,
    1024,
    TRACE_DEFAULTS.blocksPerChunk,
  );
  const limit = intOption('--trace-limit', raw.traceLimit, 1, 1 << 24);
  const storeThreshold = intOptionOr(
    '--store-threshold',
    raw.storeThreshold,
    1,
    STORE_THRESHOLD_MAX,
    1,
  );
  const plan: TracePlan = {
    file,
    mode,
    groups,
    blocksPerChunk,
    capacityTokens: intOptionOr(
      '--capacity-tokens',
      raw.capacityTokens,
      0,
      Number.MAX_SAFE_INTEGER,
      0,
    ),
    policy: namedOption('--cache-policy', raw.cachePolicy ?? 'lru', parseCachePolicy),
    storeThreshold,
    blockBytes: intOptionOr(
      '--block-bytes',
      given('blockBytes') ? raw.blockBytes : undefined,
      8,
      1 << 20,
      TRACE_DEFAULTS.blockBytes,
    ),
    gpuTokens: intOptionOr(
      '--gpu-tokens',
      given('gpuTokens') ? raw.gpuTokens : undefined,
      64,
      16_777_216,
      TRACE_DEFAULTS.gpuTokens,
    ),
    window: intOptionOr('--trace-window', raw.traceWindow, 1, 4096, TRACE_DEFAULTS.window),
    transferThreads: intOptionOr(
      '--transfer-threads',
      raw.transferThreads,
      1,
      TRANSFER_THREADS_MAX,
      1,
    ),
    seed: intOptionOr('--seed', raw.seed, 0, 2 ** 31 - 1, DEFAULT_SEED),
    namespace: parseNamespaceOptions(raw),
    json: raw.json === true,
  };
  if (plan.blockBytes % 8 !== 0) {
    throw new InvalidArgumentError(
      '--block-bytes',
      `must be a multiple of 8, got ${plan.blockBytes}`,
    );
  }
  if (limit !== undefined) plan.limit = limit;
  const speed = numberOption('--speed', raw.speed, 0, 1e9);
  if (speed !== undefined) {
    if (speed <= 0) throw new InvalidArgumentError('--speed', 'must be above 0');
    plan.speed = speed;
  }
  const tiers = parseTierOptions(raw);
  if (tiers) plan.tiers = tiers;
  return plan;
}

type TraceResult =
  | ({ mode: 'cache'; source: string; ok: boolean } & CacheReplayResult)
  | ({
      mode: 'threads';
      source: string;
      ok: boolean;
      policy: CachePolicyName;
      storeThreshold: number;
    } & ThreadedReplayResult);

/** Reads the plan's trace file (TraceFormatError names a bad line). */
function readPlanTrace(plan: TracePlan): Trace {
  return readTrace(plan.file, plan.limit !== undefined ? { limit: plan.limit } : {});
}

async function runTrace(
  plan: TracePlan,
  trace: Trace,
  onProgress?: (done: number, total: number) => void,
): Promise<TraceResult> {
  const hashing = await loadHashing();
  const tpc = plan.groups[0]!.tokensPerBlock * plan.blocksPerChunk;
  if (plan.mode === 'cache') {
    const r = replayCache(trace, hashing, {
      tokensPerChunk: tpc,
      capacityTokens: plan.capacityTokens,
      policy: plan.policy,
      storeThreshold: plan.storeThreshold,
      chunkOption: '--blocks-per-chunk',
    });
    return { mode: 'cache', source: trace.source, ...r, ok: true };
  }
  if (plan.capacityTokens !== 0 && plan.capacityTokens < tpc) {
    throw new InvalidArgumentError(
      '--capacity-tokens',
      `${plan.capacityTokens} tokens hold no ${tpc}-token chunk (0 means unlimited)`,
    );
  }
  const config = traceRuntimeConfig(trace, hashing, {
    groups: plan.groups,
    blocksPerChunk: plan.blocksPerChunk,
    bytesPerBlock: plan.blockBytes,
    gpuTokens: plan.gpuTokens,
    capacityTokens: plan.capacityTokens,
    chunkOption: '--blocks-per-chunk',
  });
  const r = await replayThreaded(trace, {
    config: { ...config, namespace: plan.namespace },
    cache: { policy: plan.policy, storeThreshold: plan.storeThreshold },
    window: plan.window,
    ...(plan.speed !== undefined ? { speed: plan.speed } : {}),
    transferThreads: plan.transferThreads,
    ...(plan.tiers ? { tiers: plan.tiers } : {}),
    seed: plan.seed,
    ...(onProgress ? { onProgress: (done, total) => onProgress(done, total) } : {}),
  });
  const ok = r.holes === 0 && r.mismatches === 0 && r.verifyOk && r.completed === r.trace.requests;
  return {
    mode: 'threads',
    source: trace.source,
    policy: plan.policy,
    storeThreshold: plan.storeThreshold,
    ...r,
    ok,
  };
}

const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
const int = (x: number) => x.toLocaleString('en-US');

function formatTraceResult(r: TraceResult, color: boolean): string {
  const p = painter(color);
  const policy = `${r.policy}${r.storeThreshold > 1 ? ` + store threshold ${r.storeThreshold}` : ''}`;
  const rows: Array<[string, string]> = [
    ['mode', r.mode === 'cache' ? 'cache (tier index and policy only)' : 'threads (the runtime)'],
    ['requests', int(r.trace.requests)],
    ['prompt tokens', int(r.trace.promptTokens)],
    ['hit tokens', int(r.trace.hitTokens)],
    ['token hit ratio', p.bold(pct(r.trace.tokenHitRatio))],
    ['cache policy', policy],
  ];
  if (r.mode === 'cache') {
    rows.push(
      [
        'capacity',
        r.capacityTokens === 0
          ? `unlimited (${int(r.capacityChunks)} chunks of ${r.tokensPerChunk} tokens)`
          : `${int(r.capacityTokens)} tokens (${int(r.capacityChunks)} chunks of ${r.tokensPerChunk})`,
      ],
      ['chunks stored / evicted', `${int(r.chunksStored)} / ${int(r.evictions)}`],
    );
    if (r.storeThreshold > 1) rows.push(['kept out by the threshold', int(r.admissionSkips)]);
    if (r.chunksDroppedForCapacity > 0) {
      rows.push(['dropped for capacity', int(r.chunksDroppedForCapacity)]);
    }
    rows.push(['wall time', `${r.wallSeconds.toFixed(2)} s`]);
  } else {
    const zero = (n: number) => (n === 0 ? p.green('0') : p.red(String(n)));
    rows.push(
      [
        'hit tokens per tier',
        `host ${int(r.hitTokensByTier.host)}, disk ${int(r.hitTokensByTier.disk)}, redis ${int(r.hitTokensByTier.redis)}`,
      ],
      ['requests completed', `${int(r.completed)} (${r.preemptions} preemptions)`],
      ['chunks stored', int(r.chunksStored)],
      ['dropped for capacity', int(r.chunksDroppedForCapacity)],
      ['tier entries verified', int(r.entriesVerified)],
      ['holes', zero(r.holes)],
      ['byte mismatches', zero(r.mismatches)],
      ['wall time', `${r.wallSeconds.toFixed(1)} s (${r.requestsPerSecond.toFixed(1)} requests/s)`],
    );
  }
  const lines = [p.bold(`kvoff simulate --trace ${r.source}`), table(rows)];
  if (r.mode === 'threads') {
    lines.push(
      r.ok
        ? p.green('ok: every request completed; no hole; every stored byte matches its key')
        : p.red('not ok: holes, byte mismatches or unfinished requests (see above)'),
    );
  }
  return `${lines.join('\n')}\n`;
}

/** The trace options of `kvoff simulate`. */
export function addTraceOptions(cmd: Command): Command {
  return cmd
    .option(
      '--trace <file>',
      "replay a request trace of Mooncake's shape (JSONL: timestamp, input_length, output_length, hash_ids)",
    )
    .option(
      '--trace-mode <mode>',
      `with --trace: threads (the runtime) or cache (the tier's index and policy only)`,
      'threads',
    )
    .option('--trace-limit <n>', 'with --trace: replay only the first n requests')
    .option(
      '--capacity-tokens <n>',
      'with --trace: host tier capacity in tokens (0: unlimited)',
      '0',
    )
    .option('--cache-policy <name>', "host tier eviction: lru, arc (vLLM's), s3-fifo", 'lru')
    .option(
      '--store-threshold <n>',
      "store a chunk only once lookups asked for it n times (vLLM's store_threshold)",
      '1',
    )
    .option(
      '--speed <x>',
      'with --trace: arrival times divided by x (default: as fast as the window allows)',
    )
    .option(
      '--trace-window <n>',
      `with --trace: requests in flight at once (default ${TRACE_DEFAULTS.window}; 1: one by one, as the cache mode)`,
    );
}

/** The action for --trace (the caller checked raw.trace is set). */
export async function traceAction(
  raw: SimulateRawOptions & TraceRawOptions,
  cmd: Command,
): Promise<void> {
  const plan = parseTraceOptions(raw, (name) => cmd.getOptionValueSource(name) === 'cli');
  if (plan.tiers?.redis?.insecure === true) process.stderr.write(`${INSECURE_TIER_WARNING}\n`);
  const color = colorAllowed(process.stdout);
  const trace = readPlanTrace(plan);
  const bar =
    plan.mode === 'threads'
      ? progress(process.stderr, trace.requests.length, 'trace', {
          quiet: plan.json && !process.stderr.isTTY,
        })
      : undefined;
  let result: TraceResult;
  try {
    result = await runTrace(plan, trace, (done) => bar?.update(done, 'requests'));
  } finally {
    bar?.stop();
  }
  if (plan.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else process.stdout.write(formatTraceResult(result, color));
  if (!result.ok) process.exitCode = 1;
}
