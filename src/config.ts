// The offloading geometry and capacities, validated once. Everything else in
// kvoff sizes its shared memory from a resolved Config, so a bad value must be
// caught here with the field and the rule it breaks, never later as a bad index.
import { ConfigError } from './errors.js';
import { KEY_HASHES, resolveNamespace } from './identity.js';
import type { KeyHash, Namespace, NamespaceInput } from './identity.js';

export type GroupKind = 'full' | 'sliding-window' | 'mamba';

export type RankLayout = 'sharded' | 'replicated';
export const RANK_LAYOUTS: readonly RankLayout[] = ['sharded', 'replicated'];

export interface GroupInput {
  kind: GroupKind;
  tokensPerBlock: number;
  /** Sliding window in tokens; required for `sliding-window`, ignored otherwise. */
  windowTokens?: number;
  /** EAGLE/MTP group: the trailing chunk is volatile while decoding. */
  eagle?: boolean;
}

export interface ConfigInput {
  groups: GroupInput[];
  blocksPerChunk?: number;
  tokensPerHash: number;
  offloadPromptOnly?: boolean;
  maxRequests?: number;
  /** Per request, per group. */
  maxBlocksPerRequest?: number;
  gpuBlocks?: number;
  tierChunks?: number;
  bytesPerBlock?: number;
  /** Put each request's hot words on their own 64-byte line (false only to measure false sharing). */
  padHotWords?: boolean;
  /**
   * vLLM's max_recompute_pending_tokens: when the chunks from the first
   * pending one to the end of a full-attention hit are worth at most this
   * many tokens, the lookup loads the ready prefix at once and the request
   * recomputes the rest instead of waiting; 0 (default) always waits.
   */
  maxRecomputePendingTokens?: number;
  /**
   * Tensor-parallel ranks (1, default, to 64): each rank holds its shard of
   * every block's bytes, copies only that shard, and a store job completes
   * only once every rank has acknowledged its copy (docs/design.md, "Ranks").
   */
  ranks?: number;
  /**
   * How the ranks hold a block: 'sharded' (default; rank r holds the r-th of
   * `ranks` equal word ranges of every block) or 'replicated' (every rank
   * holds the whole block, as with MLA: rank 0 writes, the others
   * acknowledge a store without copying, vLLM's non-writing workers).
   */
  rankLayout?: RankLayout;
  /**
   * Whose KV this is: the model (and revision, adapter, dtype, extra) every
   * key is derived under. Required (at least `model`) once a disk or Redis
   * tier is configured: sharing entries is a deliberate act.
   */
  namespace?: NamespaceInput;
  /**
   * The key hash: 'sha256' (default). 'xxh64' is an opt-in for a single
   * trusted process only (crafted collisions take practical time); with it
   * disk and Redis tiers refuse to start.
   */
  keyHash?: KeyHash;
  /**
   * Test-only: key words keep only their low N bits (16..64), so they collide
   * often while the identity check beside them stays whole. Exists so a test
   * can show every collision is a counted miss and never a wrong byte; never
   * set it otherwise.
   */
  unsafeKeyBits?: number;
}

export interface GroupConfig {
  readonly index: number;
  readonly kind: GroupKind;
  readonly tokensPerBlock: number;
  readonly tokensPerChunk: number;
  readonly hashesPerChunk: number;
  /** Chunks a sliding-window/mamba position depends on; null for full attention. */
  readonly windowChunks: number | null;
  /** The sliding window in tokens as configured; null for other kinds. */
  readonly windowTokens: number | null;
  readonly eagle: boolean;
}

export interface Config {
  readonly groups: readonly GroupConfig[];
  readonly blocksPerChunk: number;
  readonly tokensPerHash: number;
  readonly offloadPromptOnly: boolean;
  readonly maxRequests: number;
  readonly maxBlocksPerRequest: number;
  /** floor(maxBlocksPerRequest / blocksPerChunk): key capacity per request per group. */
  readonly maxChunksPerRequest: number;
  /** Token capacity per request: enough to fill every group's block table. */
  readonly maxTokensPerRequest: number;
  /** Hash capacity per request: maxTokensPerRequest / tokensPerHash. */
  readonly maxHashesPerRequest: number;
  readonly gpuBlocks: number;
  readonly tierChunks: number;
  readonly bytesPerBlock: number;
  readonly padHotWords: boolean;
  readonly maxRecomputePendingTokens: number;
  /** Tensor-parallel ranks, each holding its shard of every block (ConfigInput.ranks). */
  readonly ranks: number;
  readonly rankLayout: RankLayout;
  /** null: no namespace (host tier only). */
  readonly namespace: Namespace | null;
  readonly keyHash: KeyHash;
  /** 64 unless a test truncates key words (ConfigInput.unsafeKeyBits). */
  readonly keyBits: number;
}

/** Limits that keep every SharedArrayBuffer well under what a 2-core CI box holds. */
export const CONFIG_LIMITS = {
  groupsMax: 8,
  maxRequestsMax: 1 << 16,
  blocksPerChunkMax: 1024,
  tokensPerBlockMax: 1 << 16,
  maxBlocksPerRequestMax: 1 << 20,
  gpuBlocksMax: 1 << 24,
  tierChunksMax: 1 << 24,
  bytesPerBlockMax: 64 << 20,
  ranksMax: 64,
  sharedBytesMax: 8 * 2 ** 30,
} as const;

export const CONFIG_DEFAULTS = {
  blocksPerChunk: 1,
  offloadPromptOnly: false,
  maxRequests: 64,
  maxBlocksPerRequest: 256,
  gpuBlocks: 4096,
  tierChunks: 4096,
  bytesPerBlock: 256,
  padHotWords: true,
  maxRecomputePendingTokens: 0,
  ranks: 1,
  rankLayout: 'sharded',
  keyHash: 'sha256',
} as const;

export function resolveConfig(input: ConfigInput): Config {
  if (typeof input !== 'object' || input === null)
    throw new ConfigError('config', 'must be an object');
  const tokensPerHash = positiveInt('tokensPerHash', input.tokensPerHash, 1 << 16);
  const blocksPerChunk = positiveInt(
    'blocksPerChunk',
    input.blocksPerChunk ?? CONFIG_DEFAULTS.blocksPerChunk,
    CONFIG_LIMITS.blocksPerChunkMax,
  );
  if (!Array.isArray(input.groups) || input.groups.length === 0) {
    throw new ConfigError('groups', 'must be a non-empty array');
  }
  if (input.groups.length > CONFIG_LIMITS.groupsMax) {
    throw new ConfigError('groups', `at most ${CONFIG_LIMITS.groupsMax} groups`);
  }
  const groups = input.groups.map((g, index) =>
    resolveGroup(g, index, blocksPerChunk, tokensPerHash),
  );
  const { maxRequests, maxBlocksPerRequest, gpuBlocks, tierChunks, bytesPerBlock } =
    resolveCapacities(input, blocksPerChunk);
  const maxChunksPerRequest = Math.floor(maxBlocksPerRequest / blocksPerChunk);
  const maxTokensPerBlock = Math.max(...groups.map((g) => g.tokensPerBlock));
  const maxTokensPerRequest = maxBlocksPerRequest * maxTokensPerBlock;
  const maxHashesPerRequest = Math.floor(maxTokensPerRequest / tokensPerHash);
  const rest = resolveRest(input, bytesPerBlock);
  checkSharedBytes({
    groups,
    gpuBlocks,
    tierChunks,
    blocksPerChunk,
    bytesPerBlock,
    maxRequests,
    maxChunksPerRequest,
    maxBlocksPerRequest,
    maxTokensPerRequest,
    maxHashesPerRequest,
  });
  return Object.freeze({
    groups: Object.freeze(groups),
    blocksPerChunk,
    tokensPerHash,
    offloadPromptOnly: rest.offloadPromptOnly,
    maxRequests,
    maxBlocksPerRequest,
    maxChunksPerRequest,
    maxTokensPerRequest,
    maxHashesPerRequest,
    gpuBlocks,
    tierChunks,
    bytesPerBlock,
    padHotWords: rest.padHotWords,
    maxRecomputePendingTokens: rest.maxRecomputePendingTokens,
    ranks: rest.ranks,
    rankLayout: rest.rankLayout,
    namespace: rest.namespace,
    keyHash: rest.keyHash,
    keyBits: rest.keyBits,
  });
}

/** The config's capacities (slots, blocks per request, GPU blocks, tier chunks, block bytes), checked in order. */
function resolveCapacities(
  input: ConfigInput,
  blocksPerChunk: number,
): Pick<
  Config,
  'maxRequests' | 'maxBlocksPerRequest' | 'gpuBlocks' | 'tierChunks' | 'bytesPerBlock'
> {
  const maxRequests = positiveInt(
    'maxRequests',
    input.maxRequests ?? CONFIG_DEFAULTS.maxRequests,
    CONFIG_LIMITS.maxRequestsMax,
  );
  const maxBlocksPerRequest = positiveInt(
    'maxBlocksPerRequest',
    input.maxBlocksPerRequest ?? CONFIG_DEFAULTS.maxBlocksPerRequest,
    CONFIG_LIMITS.maxBlocksPerRequestMax,
  );
  if (maxBlocksPerRequest < blocksPerChunk) {
    throw new ConfigError(
      'maxBlocksPerRequest',
      `must be at least blocksPerChunk (${blocksPerChunk})`,
    );
  }
  const gpuBlocks = positiveInt(
    'gpuBlocks',
    input.gpuBlocks ?? CONFIG_DEFAULTS.gpuBlocks,
    CONFIG_LIMITS.gpuBlocksMax,
  );
  if (gpuBlocks < 2)
    throw new ConfigError('gpuBlocks', 'must be at least 2 (block 0 is the null block)');
  const tierChunks = positiveInt(
    'tierChunks',
    input.tierChunks ?? CONFIG_DEFAULTS.tierChunks,
    CONFIG_LIMITS.tierChunksMax,
  );
  const bytesPerBlock = positiveInt(
    'bytesPerBlock',
    input.bytesPerBlock ?? CONFIG_DEFAULTS.bytesPerBlock,
    CONFIG_LIMITS.bytesPerBlockMax,
  );
  if (bytesPerBlock % 8 !== 0) throw new ConfigError('bytesPerBlock', 'must be a multiple of 8');
  return { maxRequests, maxBlocksPerRequest, gpuBlocks, tierChunks, bytesPerBlock };
}

/** The config's switches, limits of loads, ranks, namespace and key hash, checked in order. */
function resolveRest(
  input: ConfigInput,
  bytesPerBlock: number,
): Pick<
  Config,
  | 'offloadPromptOnly'
  | 'padHotWords'
  | 'maxRecomputePendingTokens'
  | 'ranks'
  | 'rankLayout'
  | 'namespace'
  | 'keyHash'
  | 'keyBits'
> {
  const offloadPromptOnly = bool(
    'offloadPromptOnly',
    input.offloadPromptOnly ?? CONFIG_DEFAULTS.offloadPromptOnly,
  );
  const padHotWords = bool('padHotWords', input.padHotWords ?? CONFIG_DEFAULTS.padHotWords);
  const maxRecomputePendingTokens =
    input.maxRecomputePendingTokens ?? CONFIG_DEFAULTS.maxRecomputePendingTokens;
  if (
    typeof maxRecomputePendingTokens !== 'number' ||
    !Number.isInteger(maxRecomputePendingTokens) ||
    maxRecomputePendingTokens < 0
  ) {
    throw new ConfigError('maxRecomputePendingTokens', 'must be an integer of at least 0');
  }
  const ranks = positiveInt('ranks', input.ranks ?? CONFIG_DEFAULTS.ranks, CONFIG_LIMITS.ranksMax);
  const rankLayout = input.rankLayout ?? CONFIG_DEFAULTS.rankLayout;
  if (!RANK_LAYOUTS.includes(rankLayout)) {
    throw new ConfigError('rankLayout', `must be one of ${RANK_LAYOUTS.join(', ')}`);
  }
  // Each rank's shard is a whole number of 32-bit words, the copy's unit.
  if (rankLayout === 'sharded' && bytesPerBlock % (4 * ranks) !== 0) {
    throw new ConfigError(
      'ranks',
      `bytesPerBlock (${bytesPerBlock}) must split into ${ranks} shards of whole 32-bit words`,
    );
  }
  const namespace = resolveNamespace(input.namespace);
  const keyHash = input.keyHash ?? CONFIG_DEFAULTS.keyHash;
  if (!KEY_HASHES.includes(keyHash)) {
    throw new ConfigError('keyHash', `must be one of ${KEY_HASHES.join(', ')}`);
  }
  const keyBits =
    input.unsafeKeyBits === undefined ? 64 : positiveInt('unsafeKeyBits', input.unsafeKeyBits, 64);
  if (keyBits < 16) throw new ConfigError('unsafeKeyBits', 'must be at least 16');

  return {
    offloadPromptOnly,
    padHotWords,
    maxRecomputePendingTokens,
    ranks,
    rankLayout,
    namespace,
    keyHash,
    keyBits,
  };
}

/** Shared memory is laid out up front: refuses a config whose arenas and state cannot fit. */
function checkSharedBytes(
  c: Pick<
    Config,
    | 'groups'
    | 'gpuBlocks'
    | 'tierChunks'
    | 'blocksPerChunk'
    | 'bytesPerBlock'
    | 'maxRequests'
    | 'maxChunksPerRequest'
    | 'maxBlocksPerRequest'
    | 'maxTokensPerRequest'
    | 'maxHashesPerRequest'
  >,
): void {
  const { groups, gpuBlocks, tierChunks, blocksPerChunk, bytesPerBlock, maxRequests } = c;
  const { maxChunksPerRequest, maxBlocksPerRequest, maxTokensPerRequest, maxHashesPerRequest } = c;
  const arenaBytes = gpuBlocks * bytesPerBlock + tierChunks * blocksPerChunk * bytesPerBlock;
  // Per key a key word and a 24-byte check; per hash a 32-byte digest.
  const stateBytes =
    maxRequests * groups.length * (maxChunksPerRequest * 32 + maxBlocksPerRequest * 4) +
    maxRequests * (maxTokensPerRequest * 4 + maxHashesPerRequest * 32);
  if (arenaBytes + stateBytes > CONFIG_LIMITS.sharedBytesMax) {
    throw new ConfigError(
      'capacities',
      `shared memory would be ${Math.ceil((arenaBytes + stateBytes) / 2 ** 20)} MiB, over the ${CONFIG_LIMITS.sharedBytesMax / 2 ** 30} GiB limit`,
    );
  }
}

function resolveGroup(
  g: GroupInput,
  index: number,
  blocksPerChunk: number,
  tokensPerHash: number,
): GroupConfig {
  const field = `groups[${index}]`;
  if (typeof g !== 'object' || g === null) throw new ConfigError(field, 'must be an object');
  if (g.kind !== 'full' && g.kind !== 'sliding-window' && g.kind !== 'mamba') {
    throw new ConfigError(`${field}.kind`, 'must be one of full, sliding-window, mamba');
  }
  const tokensPerBlock = positiveInt(
    `${field}.tokensPerBlock`,
    g.tokensPerBlock,
    CONFIG_LIMITS.tokensPerBlockMax,
  );
  const tokensPerChunk = tokensPerBlock * blocksPerChunk;
  if (tokensPerBlock % tokensPerHash !== 0) {
    throw new ConfigError(
      `${field}.tokensPerBlock`,
      `tokensPerBlock (${tokensPerBlock}) must be a multiple of tokensPerHash (${tokensPerHash})`,
    );
  }
  let windowChunks: number | null = null;
  let windowTokens: number | null = null;
  if (g.kind === 'sliding-window') {
    windowTokens = positiveInt(`${field}.windowTokens`, g.windowTokens, 1 << 30);
    windowChunks = Math.ceil(windowTokens / tokensPerChunk);
  } else if (g.kind === 'mamba') {
    if (g.windowTokens !== undefined) {
      throw new ConfigError(`${field}.windowTokens`, 'only sliding-window groups have a window');
    }
    // A state group depends on a single state: one chunk.
    windowChunks = 1;
  } else if (g.windowTokens !== undefined) {
    throw new ConfigError(`${field}.windowTokens`, 'only sliding-window groups have a window');
  }
  return Object.freeze({
    index,
    kind: g.kind,
    tokensPerBlock,
    tokensPerChunk,
    hashesPerChunk: tokensPerChunk / tokensPerHash,
    windowChunks,
    windowTokens,
    eagle: bool(`${field}.eagle`, g.eagle ?? false),
  });
}

function positiveInt(field: string, value: unknown, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value))
    throw new ConfigError(field, 'must be an integer');
  if (value < 1) throw new ConfigError(field, 'must be at least 1');
  if (value > max) throw new ConfigError(field, `must be at most ${max}`);
  return value;
}

function bool(field: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new ConfigError(field, 'must be a boolean');
  return value;
}
