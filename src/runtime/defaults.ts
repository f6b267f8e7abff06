// The default run: the seeds' production overflow shape, scaled to finish in
// well under a minute on 2 cores. 16 requests of about 50,000 prompt tokens
// against a GPU pool of 611,840 tokens (38,240 blocks of 16 tokens), a hybrid
// model (full attention with EAGLE plus a 1,024-token sliding window), async
// lag on the hasher and allocator. Admission pressure preempts; shared
// prefixes give later requests tier hits.
import type { ConfigInput, GroupInput } from '../config.js';
import { ConfigError } from '../errors.js';
import { refuseUnknownKeys } from '../known-keys.js';
import type { KnownKeys } from '../known-keys.js';
import { Prng } from '../prng.js';
import type { RequestInput } from './request-rules.js';

/**
 * The one default seed: the engine simulator, the lag draws, generated
 * workloads, `kvoff simulate --seed` and `kvoff serve --seed` all start from it.
 */
export const DEFAULT_SEED = 1;

/**
 * The runtime's config when `start()` is given none, and what a partial one
 * is merged over. 256-byte blocks keep an embedded default runtime at about
 * 26 MB of shared memory (38,240 GPU blocks and 65,536 tier blocks); `kvoff
 * simulate` uses 4 KiB blocks instead (--block-bytes), sized like one layer's
 * K and V of a 16-token block, so its GB/s figure means something.
 */
export const DEFAULT_RUNTIME_CONFIG: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 16, eagle: true },
    { kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 1024 },
  ],
  blocksPerChunk: 4,
  tokensPerHash: 16,
  maxRequests: 32,
  // 53,248 tokens per request: a 50k prompt plus decode.
  maxBlocksPerRequest: 3328,
  gpuBlocks: 38_240,
  tierChunks: 16_384,
  bytesPerBlock: 256,
};

/** Every key a ConfigInput has; OffloadRuntime.start refuses any other. */
const CONFIG_INPUT_KEYS: KnownKeys<ConfigInput> = {
  groups: true,
  blocksPerChunk: true,
  tokensPerHash: true,
  offloadPromptOnly: true,
  maxRequests: true,
  maxBlocksPerRequest: true,
  gpuBlocks: true,
  namespace: true,
  keyHash: true,
  unsafeKeyBits: true,
  tierChunks: true,
  bytesPerBlock: true,
  padHotWords: true,
  maxRecomputePendingTokens: true,
  ranks: true,
  rankLayout: true,
};

const GROUP_INPUT_KEYS: KnownKeys<GroupInput> = {
  kind: true,
  tokensPerBlock: true,
  windowTokens: true,
  eagle: true,
};
const configError = (what: string, rule: string) => new ConfigError(what, rule);

/**
 * `OffloadRuntime.start({ config })`'s input: each field left out takes
 * DEFAULT_RUNTIME_CONFIG's value, so `{ gpuBlocks: 1000 }` changes the pool
 * and nothing else. One exception: given `groups` without `tokensPerHash`,
 * the hash size is the largest that divides every group's tokensPerBlock
 * (the default's 16 would refuse 8-token blocks). Unknown fields are refused
 * (ConfigError naming the field). resolveConfig, for LocalOffload and the
 * roles, merges nothing: its CONFIG_DEFAULTS fill what a caller leaves out.
 */
export function runtimeConfigInput(given: Partial<ConfigInput> | undefined): ConfigInput {
  if (given === undefined) return DEFAULT_RUNTIME_CONFIG;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new ConfigError('config', 'must be an object');
  }
  refuseUnknownKeys(given, CONFIG_INPUT_KEYS, 'config.', configError);
  if (Array.isArray(given.groups)) {
    given.groups.forEach((g, i) => {
      if (typeof g === 'object' && g !== null) {
        refuseUnknownKeys(g, GROUP_INPUT_KEYS, `config.groups[${i}].`, configError);
      }
    });
  }
  const merged: ConfigInput = { ...DEFAULT_RUNTIME_CONFIG };
  for (const [key, value] of Object.entries(given)) {
    if (value !== undefined) (merged as unknown as Record<string, unknown>)[key] = value;
  }
  if (given.tokensPerHash === undefined && Array.isArray(given.groups)) {
    const sizes = given.groups.map((g: { tokensPerBlock?: unknown } | null) => g?.tokensPerBlock);
    if (sizes.length > 0 && sizes.every((t) => Number.isSafeInteger(t) && (t as number) > 0)) {
      merged.tokensPerHash = (sizes as number[]).reduce(gcd);
    }
  }
  return merged;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

export interface WorkloadOptions {
  requests?: number;
  promptTokens?: number;
  /** Distinct shared prefixes; requests cycle through them. */
  prefixes?: number;
  /**
   * Tokens each request shares with its prefix; default 30% of the prompt, so
   * the workload is distinct prompts behind a common head (a system prompt)
   * and reuse hits part of a prompt. A single request's `prefixId` without
   * `sharedPrefixTokens` (submit(), the HTTP API) shares the whole prompt
   * instead: there it names one prompt, here it names a family of them.
   */
  sharedPrefixTokens?: number;
  maxDecodeTokens?: number;
  seed?: number;
}

/** The default workload: requests of about `promptTokens` (±4%), cycling over shared prefixes. */
export function defaultWorkload(options: WorkloadOptions = {}): RequestInput[] {
  const n = options.requests ?? 16;
  const prompt = options.promptTokens ?? 50_000;
  const prefixes = options.prefixes ?? 4;
  const shared = options.sharedPrefixTokens ?? Math.floor(prompt * 0.3);
  const random = new Prng(options.seed ?? DEFAULT_SEED);
  const out: RequestInput[] = [];
  for (let i = 0; i < n; i += 1) {
    const length = Math.round(prompt * (0.96 + 0.08 * random.next()));
    out.push({
      promptLength: length,
      prefixId: i % prefixes,
      sharedPrefixTokens: Math.min(shared, length - 1),
      maxDecodeTokens: options.maxDecodeTokens ?? 512,
    });
  }
  return out;
}
