// The default run: the seeds' production overflow shape, scaled to finish in
// well under a minute on 2 cores. 16 requests of about 50,000 prompt tokens
// against a GPU pool of 611,840 tokens (38,240 blocks of 16 tokens), a hybrid
// model (full attention with EAGLE plus a 1,024-token sliding window), async
// lag on the hasher and allocator. Admission pressure preempts; shared
// prefixes give later requests tier hits.
import type { ConfigInput } from '../config.js';
import { Prng } from '../prng.js';
import type { RequestInput } from './request-rules.js';

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

export interface WorkloadOptions {
  requests?: number;
  promptTokens?: number;
  /** Distinct shared prefixes; requests cycle through them. */
  prefixes?: number;
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
  const random = new Prng(options.seed ?? 7);
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
