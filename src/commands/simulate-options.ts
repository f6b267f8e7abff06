// `kvoff simulate` options: from commander's strings to a validated plan
// (config, lag, engine and workload). Pure, so every rule is unit-tested
// without starting a runtime.
import { parseLoadOptions } from './load-options.js';
import type { LoadFailurePolicy } from '../lookup.js';
import { totalmem } from 'node:os';
import { DEFAULT_SEED } from '../runtime/defaults.js';
import type { ConfigInput, GroupInput, GroupKind, RankLayout } from '../config.js';
import { CONFIG_LIMITS, RANK_LAYOUTS, resolveConfig } from '../config.js';
import { InvalidArgumentError, quoted } from '../errors.js';
import { TRANSFER_BACKENDS } from '../runtime/runtime-gpu.js';
import type { TransferBackendName } from '../runtime/runtime-gpu.js';
import type { StorePolicy } from '../ready.js';
import {
  TRANSFER_THREADS_MAX,
  intOption,
  intOptionOr,
  numberOption,
  namedOption,
  policyOption,
} from './options.js';
import { parseNamespaceOptions, parseTierOptions } from './tier-options.js';
import { parseEventOptions } from './event-options.js';
import type { EventRawOptions } from './event-options.js';
import type { EventsOptions } from '../events/types.js';
import type { TierRawOptions } from './tier-options.js';
import type { TiersOptions } from '../tier/cascade.js';
import { STORE_THRESHOLD_MAX, parseCachePolicy } from '../tier/policy/index.js';
import type { CacheOptions } from '../tier/policy/index.js';

/** Named group layouts for --groups; anything else is parsed as a spec. */
export const GROUP_PRESETS: Readonly<Record<string, GroupInput[]>> = {
  // The seeds' hybrid model: full attention with EAGLE/MTP plus a sliding window.
  hybrid: [
    { kind: 'full', tokensPerBlock: 16, eagle: true },
    { kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 1024 },
  ],
  full: [{ kind: 'full', tokensPerBlock: 16 }],
  'full-eagle': [{ kind: 'full', tokensPerBlock: 16, eagle: true }],
  'hybrid-mamba': [
    { kind: 'full', tokensPerBlock: 16, eagle: true },
    { kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 1024 },
    { kind: 'mamba', tokensPerBlock: 16 },
  ],
};

export const SIMULATE_DEFAULTS = {
  requests: 16,
  promptTokens: 50_000,
  gpuTokens: 611_840,
  groups: 'hybrid',
  blocksPerChunk: 4,
  tierChunks: 16_384,
  // As defaultWorkload: long enough that all 16 requests overlap and the pool preempts.
  decodeTokens: 512,
  prefixes: 4,
  transferThreads: 1,
  seed: DEFAULT_SEED,
  traceRequests: 3,
  maxRequests: 32,
  // Not DEFAULT_RUNTIME_CONFIG's 256 B: see BLOCK_BYTES_MEANING.
  blockBytes: 4096,
  // The engine simulator's own default is 0 (an embedding program's requests
  // are not aborted at random); the simulation aborts a few to exercise the
  // abort paths: about 10 of 1,700 requests at this rate.
  abortRate: 0.002,
} as const;

/**
 * What one simulated block stands for, for --help and the result: the bytes
 * are a pattern derived from the chunk's key (so every copy is verifiable),
 * sized like one layer's K and V of a 16-token block for one fp16 head of 64
 * dimensions (2 x 16 x 64 x 2 B = 4 KiB). A real model's block is that times
 * layers x KV heads (MiB per block): too much to simulate on a shared box.
 */
export const BLOCK_BYTES_MEANING =
  "bytes per GPU block: a key-derived pattern sized like one layer's K and V for 16 tokens of one 64-dim fp16 head (the embedding API's default config uses 256, to stay small)";

/** The simulated GPU pool plus the host tier may take at most this share of the machine's memory. */
const MEMORY_SHARE_MAX = 0.25;

/** Per request: prompt variation (±4%) plus decode plus EAGLE drafts, in tokens. */
export const PROMPT_SLACK = 1.05;
/** The shortest prompt defaultWorkload draws, as a fraction of --prompt-tokens. */
const PROMPT_SHORTEST = 0.96;
const DECODE_SLACK_TOKENS = 64;

/** What commander gives the action (all strings, camel-cased). */
export interface SimulateRawOptions extends TierRawOptions, EventRawOptions {
  requests?: string;
  promptTokens?: string;
  gpuTokens?: string;
  groups?: string;
  blocksPerChunk?: string;
  tierChunks?: string;
  decodeTokens?: string;
  prefixes?: string;
  sharedPrefixTokens?: string;
  lagHashesPerWake?: string;
  lagPublishDelayMs?: string;
  lagJitterMs?: string;
  abortRate?: string;
  /** Commander's --no-offload sets this to false. */
  offload?: boolean;
  seed?: string;
  transferThreads?: string;
  ranks?: string;
  rankLayout?: string;
  backend?: string;
  policy?: string;
  report?: string;
  traceRequests?: string;
  blockBytes?: string;
  cachePolicy?: string;
  storeThreshold?: string;
  loadFailurePolicy?: string;
  maxRecomputePendingTokens?: string;
  json?: boolean;
}

/** Options that only a trace replay takes (see simulate-trace.ts): refused without --trace. */
const TRACE_ONLY: ReadonlyArray<[string, string]> = [
  ['traceMode', '--trace-mode'],
  ['traceLimit', '--trace-limit'],
  ['capacityTokens', '--capacity-tokens'],
  ['speed', '--speed'],
  ['traceWindow', '--trace-window'],
];

export interface SimulatePlan {
  policy: StorePolicy;
  config: ConfigInput;
  groupsName: string;
  transferThreads: number;
  /** What holds the GPU's KV and copies it (RuntimeOptions.transferBackend). */
  backend: TransferBackendName;
  lag: {
    hasherHashesPerWake?: number;
    allocatorPublishDelayMs?: number;
    jitterMs?: number;
    seed: number;
  };
  seed: number;
  /** Per engine step: chance one queued and one running request is aborted. */
  abortRate: number;
  /** false: the engine opens requests with nothing offloadable and loads nothing (the baseline). */
  offload: boolean;
  workload: {
    requests: number;
    promptTokens: number;
    prefixes: number;
    sharedPrefixTokens?: number;
    maxDecodeTokens: number;
    seed: number;
  };
  gpuTokens: number;
  /** Bytes per simulated GPU block (the tier's chunks are blocksPerChunk of them). */
  blockBytes: number;
  report?: string;
  traceRequests: number;
  json: boolean;
  /** Levels below host memory (--disk, --redis); host only when absent. */
  tiers?: TiersOptions;
  /** KV events over ZeroMQ (--kv-events); none when absent. */
  events?: EventsOptions;
  /** The host tier's cache policy and store threshold (--cache-policy, --store-threshold); LRU, 1 when absent. */
  cache?: CacheOptions;
  /** --load-failure-policy (RuntimeOptions.loadFailurePolicy); recompute when absent. */
  loadFailurePolicy?: LoadFailurePolicy;
}

export function parseGroups(spec: string): GroupInput[] {
  const preset = GROUP_PRESETS[spec];
  if (preset) return preset.map((g) => ({ ...g }));
  const parts = spec.split(',').map((s) => s.trim());
  if (parts.length === 0 || parts.some((p) => p === '')) {
    throw new InvalidArgumentError('--groups', groupsRule());
  }
  return parts.map((part) => {
    const [kind, tpb, ...rest] = part.split(':');
    if (kind !== 'full' && kind !== 'sliding-window' && kind !== 'mamba') {
      throw new InvalidArgumentError(
        '--groups',
        `unknown group kind ${quoted(String(kind))}; ${groupsRule()}`,
      );
    }
    const tokensPerBlock = intOptionOr('--groups tokensPerBlock', tpb, 1, 1 << 16, 16);
    const g: GroupInput = { kind: kind as GroupKind, tokensPerBlock };
    for (const r of rest) {
      if (r === 'eagle') g.eagle = true;
      else if (kind === 'sliding-window' && g.windowTokens === undefined) {
        g.windowTokens = intOptionOr('--groups windowTokens', r, 1, 1 << 30, 1);
      } else throw new InvalidArgumentError('--groups', `${quoted(part)}: ${groupsRule()}`);
    }
    if (kind === 'sliding-window' && g.windowTokens === undefined) {
      throw new InvalidArgumentError(
        '--groups',
        `${quoted(part)}: a sliding-window group needs its window in tokens`,
      );
    }
    return g;
  });
}

function groupsRule(): string {
  return `use a preset (${Object.keys(GROUP_PRESETS).join(', ')}) or a comma list of kind:tokensPerBlock[:windowTokens][:eagle], e.g. full:16:eagle,sliding-window:16:1024`;
}

export function parseSimulateOptions(
  raw: SimulateRawOptions,
  given: (name: string) => boolean = () => false,
): SimulatePlan {
  for (const [key, flag] of TRACE_ONLY) {
    if (given(key)) throw new InvalidArgumentError(flag, 'needs --trace FILE');
  }
  const sizes = sizeFlags(raw);
  const { policy, requests, promptTokens, prefixes, sharedPrefixTokens, seed } = sizes;
  const { groupsName, gpuTokens, decodeTokens } = sizes;
  const run = runFlags(raw, seed);
  const { transferThreads, backend, traceRequests, lag, abortRate, blockBytes } = run;
  const { config, load } = poolConfig(raw, sizes, run);
  const workload: SimulatePlan['workload'] = {
    requests,
    promptTokens,
    prefixes,
    maxDecodeTokens: decodeTokens,
    seed,
  };
  if (sharedPrefixTokens !== undefined) workload.sharedPrefixTokens = sharedPrefixTokens;
  const plan: SimulatePlan = {
    policy,
    config,
    groupsName,
    transferThreads,
    backend: backend as TransferBackendName,
    lag,
    seed,
    workload,
    gpuTokens,
    blockBytes,
    traceRequests,
    abortRate,
    offload: raw.offload !== false,
    json: raw.json === true,
  };
  if (raw.report !== undefined) plan.report = raw.report;
  if (load.loadFailurePolicy !== undefined) plan.loadFailurePolicy = load.loadFailurePolicy;
  const tiers = parseTierOptions(raw);
  if (tiers) plan.tiers = tiers;
  const events = parseEventOptions(raw);
  if (events) plan.events = events;
  const cachePolicy = namedOption('--cache-policy', raw.cachePolicy ?? 'lru', parseCachePolicy);
  const storeThreshold = intOptionOr(
    '--store-threshold',
    raw.storeThreshold,
    1,
    STORE_THRESHOLD_MAX,
    1,
  );
  if (cachePolicy !== 'lru' || storeThreshold !== 1)
    plan.cache = { policy: cachePolicy, storeThreshold };
  return plan;
}

/** The sizes of a simulate run (workload and geometry), checked in option order. */
function sizeFlags(raw: SimulateRawOptions) {
  const policy = policyOption(raw.policy);
  const requests = intOptionOr('--requests', raw.requests, 1, 4096, SIMULATE_DEFAULTS.requests);
  const promptTokens = intOptionOr(
    '--prompt-tokens',
    raw.promptTokens,
    16,
    262_144,
    SIMULATE_DEFAULTS.promptTokens,
  );
  const gpuTokens = intOptionOr(
    '--gpu-tokens',
    raw.gpuTokens,
    64,
    16_777_216,
    SIMULATE_DEFAULTS.gpuTokens,
  );
  const groupsName = raw.groups ?? SIMULATE_DEFAULTS.groups;
  const groups = parseGroups(groupsName);
  const blocksPerChunk = intOptionOr(
    '--blocks-per-chunk',
    raw.blocksPerChunk,
    1,
    64,
    SIMULATE_DEFAULTS.blocksPerChunk,
  );
  const tierChunks = intOptionOr(
    '--tier-chunks',
    raw.tierChunks,
    1,
    1 << 22,
    SIMULATE_DEFAULTS.tierChunks,
  );
  const decodeTokens = intOptionOr(
    '--decode-tokens',
    raw.decodeTokens,
    1,
    16_384,
    SIMULATE_DEFAULTS.decodeTokens,
  );
  const prefixes = intOptionOr('--prefixes', raw.prefixes, 1, 4096, SIMULATE_DEFAULTS.prefixes);
  const sharedPrefixTokens = intOption(
    '--shared-prefix-tokens',
    raw.sharedPrefixTokens,
    0,
    promptTokens,
  );
  const seed = intOptionOr('--seed', raw.seed, 0, 2 ** 31 - 1, SIMULATE_DEFAULTS.seed);
  return {
    policy,
    requests,
    promptTokens,
    gpuTokens,
    groupsName,
    groups,
    blocksPerChunk,
    tierChunks,
    decodeTokens,
    prefixes,
    sharedPrefixTokens,
    seed,
  };
}

/** How a simulate run runs (threads, backend, lag, aborts, block bytes, ranks), checked in option order. */
function runFlags(raw: SimulateRawOptions, seed: number) {
  const transferThreads = intOptionOr(
    '--transfer-threads',
    raw.transferThreads,
    1,
    TRANSFER_THREADS_MAX,
    SIMULATE_DEFAULTS.transferThreads,
  );
  const backend = raw.backend ?? 'shared-memory';
  if (!(TRANSFER_BACKENDS as readonly string[]).includes(backend)) {
    throw new InvalidArgumentError('--backend', `must be one of ${TRANSFER_BACKENDS.join(', ')}`);
  }
  const traceRequests = intOptionOr(
    '--trace-requests',
    raw.traceRequests,
    0,
    16,
    raw.report ? SIMULATE_DEFAULTS.traceRequests : 0,
  );
  const lag: SimulatePlan['lag'] = { seed };
  const hashes = intOption('--lag-hashes-per-wake', raw.lagHashesPerWake, 1, 1_000_000);
  if (hashes !== undefined) lag.hasherHashesPerWake = hashes;
  const delay = intOption('--lag-publish-delay-ms', raw.lagPublishDelayMs, 0, 1000);
  if (delay !== undefined) lag.allocatorPublishDelayMs = delay;
  const jitter = intOption('--lag-jitter-ms', raw.lagJitterMs, 0, 1000);
  if (jitter !== undefined) lag.jitterMs = jitter;
  const abortRate =
    numberOption('--abort-rate', raw.abortRate, 0, 1) ?? SIMULATE_DEFAULTS.abortRate;
  const blockBytes = intOptionOr(
    '--block-bytes',
    raw.blockBytes,
    8,
    1 << 20,
    SIMULATE_DEFAULTS.blockBytes,
  );
  if (blockBytes % 8 !== 0) {
    throw new InvalidArgumentError('--block-bytes', `must be a multiple of 8, got ${blockBytes}`);
  }
  const ranks = intOptionOr('--ranks', raw.ranks, 1, CONFIG_LIMITS.ranksMax, 1);
  const rankLayout = raw.rankLayout ?? 'sharded';
  if (!(RANK_LAYOUTS as readonly string[]).includes(rankLayout)) {
    throw new InvalidArgumentError('--rank-layout', `must be one of ${RANK_LAYOUTS.join(', ')}`);
  }
  if (rankLayout === 'sharded' && blockBytes % (4 * ranks) !== 0) {
    throw new InvalidArgumentError(
      '--ranks',
      `--block-bytes ${blockBytes} must split into ${ranks} shards of whole 32-bit words`,
    );
  }
  if (raw.report !== undefined && raw.report.trim() === '') {
    throw new InvalidArgumentError('--report', 'needs a file name');
  }

  return { transferThreads, backend, traceRequests, lag, abortRate, blockBytes, ranks, rankLayout };
}

/**
 * The runtime config of a simulate run: each request's block table sized for
 * the largest prompt drawn, a pool and a tier that can hold one request, and
 * shared memory within a quarter of the machine's.
 */
function poolConfig(
  raw: SimulateRawOptions,
  sizes: ReturnType<typeof sizeFlags>,
  run: ReturnType<typeof runFlags>,
): { config: ConfigInput; load: ReturnType<typeof parseLoadOptions> } {
  const { blockBytes, ranks, rankLayout } = run;
  const { groups, promptTokens, decodeTokens, blocksPerChunk, gpuTokens, tierChunks } = sizes;
  // Size each request's block table for the largest prompt the workload draws
  // plus decode; the pool is given in tokens and turned into blocks.
  const tokensPerBlockMin = Math.min(...groups.map((g) => g.tokensPerBlock));
  const tokensPerBlockMax = Math.max(...groups.map((g) => g.tokensPerBlock));
  const perRequestTokens =
    Math.ceil(promptTokens * PROMPT_SLACK) + decodeTokens + DECODE_SLACK_TOKENS;
  const blocks = Math.ceil(perRequestTokens / tokensPerBlockMin);
  const maxBlocksPerRequest = Math.ceil(blocks / blocksPerChunk) * blocksPerChunk;
  const gpuBlocks = Math.floor(gpuTokens / tokensPerBlockMax);
  if (gpuBlocks < 2)
    throw new InvalidArgumentError('--gpu-tokens', 'the pool must hold at least 2 blocks');
  // A request the pool can never hold would only be aborted: refuse the run up front.
  // Lower bound: the shortest prompt drawn, plus one token, in every full-attention group.
  const shortestPrompt = Math.floor(promptTokens * PROMPT_SHORTEST);
  const blocksNeeded = Math.max(
    0,
    ...groups
      .filter((g) => g.kind === 'full')
      .map((g) => Math.ceil((shortestPrompt + 1) / g.tokensPerBlock)),
  );
  if (blocksNeeded > gpuBlocks) {
    throw new InvalidArgumentError(
      '--gpu-tokens',
      `a pool of ${gpuTokens} tokens (${gpuBlocks} blocks) can never hold one request of ~${promptTokens} prompt tokens, ` +
        `which needs at least ${blocksNeeded} blocks; raise --gpu-tokens or lower --prompt-tokens`,
    );
  }
  checkTierHoldsOnePrompt(groups, blocksPerChunk, tierChunks, promptTokens, shortestPrompt);
  const config: ConfigInput = {
    groups,
    blocksPerChunk,
    tokensPerHash: gcdAll(groups.map((g) => g.tokensPerBlock)),
    maxRequests: SIMULATE_DEFAULTS.maxRequests,
    maxBlocksPerRequest,
    gpuBlocks,
    tierChunks,
    bytesPerBlock: blockBytes,
    namespace: parseNamespaceOptions(raw),
    ...(ranks > 1 ? { ranks, rankLayout: rankLayout as RankLayout } : {}),
  };
  const load = parseLoadOptions(raw);
  if (load.maxRecomputePendingTokens !== undefined) {
    config.maxRecomputePendingTokens = load.maxRecomputePendingTokens;
  }
  // Fail here, with the option's name, rather than deep inside the runtime.
  resolveConfig(config);
  const arenaBytes = (gpuBlocks + tierChunks * blocksPerChunk) * blockBytes;
  const memoryMax = Math.floor(totalmem() * MEMORY_SHARE_MAX);
  if (arenaBytes > memoryMax) {
    throw new InvalidArgumentError(
      '--block-bytes',
      `the GPU pool and the tier would take ${mib(arenaBytes)} MiB of shared memory, over ${mib(memoryMax)} MiB ` +
        `(a quarter of this machine's memory); lower --block-bytes, --gpu-tokens or --tier-chunks`,
    );
  }
  return { config, load };
}

/**
 * Refuses a host tier too small to hold what a hit on one request's whole
 * prompt needs: every full-attention chunk of the shortest prompt drawn plus
 * a sliding window's chunks (a lower bound: state groups are not counted).
 * Such a tier never served a prefix; `--tier-chunks 32` with 2,048-token
 * prompts stored nothing at all (every chunk dropped for capacity) and the
 * run still said ok. A tier above the bound can still drop chunks for
 * capacity: the result's ok line says how many.
 */
function checkTierHoldsOnePrompt(
  groups: readonly GroupInput[],
  blocksPerChunk: number,
  tierChunks: number,
  promptTokens: number,
  shortestPrompt: number,
): void {
  let needed = 0;
  const parts: string[] = [];
  for (const g of groups) {
    const tokensPerChunk = g.tokensPerBlock * blocksPerChunk;
    const promptChunks = Math.floor(shortestPrompt / tokensPerChunk);
    let n = 0;
    if (g.kind === 'full') n = promptChunks;
    else if (g.kind === 'sliding-window') {
      n = Math.min(promptChunks, Math.ceil((g.windowTokens ?? 0) / tokensPerChunk));
    }
    needed += n;
    if (n > 0) parts.push(`${n} ${g.kind}`);
  }
  if (tierChunks >= needed) return;
  throw new InvalidArgumentError(
    '--tier-chunks',
    `a tier of ${tierChunks} chunks can never hold one request's prompt: a hit on ~${promptTokens} tokens needs at least ${needed} chunks (${parts.join(' + ')}); ` +
      'raise --tier-chunks or lower --prompt-tokens',
  );
}

function mib(bytes: number): number {
  return Math.ceil(bytes / 2 ** 20);
}

function gcdAll(values: readonly number[]): number {
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
  return values.reduce((a, b) => gcd(a, b));
}
