// The small configurations the tests share, so a test names the one it runs
// on instead of spelling out another copy. Spread one and override a field or
// two when a test needs its own (e.g. { ...ONE_GROUP, tierChunks: 3 }).
import type { ConfigInput } from '../../src/config.js';

/** One full-attention group of 4-token blocks (a chunk is one block), room for 8 requests. */
export const ONE_GROUP: ConfigInput = {
  groups: [{ kind: 'full', tokensPerBlock: 4 }],
  blocksPerChunk: 1,
  tokensPerHash: 4,
  maxRequests: 8,
  maxBlocksPerRequest: 64,
  gpuBlocks: 512,
  tierChunks: 256,
};

/** One full-attention group of 4-token blocks (a chunk is one block), room for a few short requests. */
export const SMALL_ONE_GROUP: ConfigInput = {
  ...ONE_GROUP,
  maxRequests: 4,
  maxBlocksPerRequest: 16,
  gpuBlocks: 64,
  tierChunks: 16,
};

/** Two groups (full attention with EAGLE, a 32-token window), 2 blocks per chunk: the runtime tests' pool and tier pressure. */
export const SMALL_HYBRID: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 4, eagle: true },
    { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 32 },
  ],
  blocksPerChunk: 2,
  tokensPerHash: 4,
  maxRequests: 24,
  maxBlocksPerRequest: 512,
  gpuBlocks: 1500,
  tierChunks: 700,
  bytesPerBlock: 64,
};

/** The smallest runtime the regression tests start: one full-attention group, 2 blocks per chunk. */
export const TINY_FULL: ConfigInput = {
  groups: [{ kind: 'full', tokensPerBlock: 4 }],
  blocksPerChunk: 2,
  tokensPerHash: 4,
  maxRequests: 4,
  maxBlocksPerRequest: 64,
  gpuBlocks: 256,
  tierChunks: 64,
  bytesPerBlock: 16,
};
