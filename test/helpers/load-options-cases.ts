// The per-request load limits' cases, shared by the library test
// (lookup-load-options.test.ts) and the HTTP test (serve-load-options.test.ts)
// so both doors are held to the same answers.
import type { RequestInput } from '../../src/runtime/runtime.js';

/** A 4,096-token prompt; its first half is submitted first. */
const LOAD_OPTIONS_PROMPT = Array.from({ length: 4096 }, (_, i) => (i * 7919 + 11) % 50_000);

/** The sequence both doors run: [request, expected hitChunks]. 64-token chunks (default config). */
export const LOAD_OPTIONS_SEQUENCE: readonly [RequestInput, number][] = [
  [{ promptTokens: LOAD_OPTIONS_PROMPT.slice(0, 2048), maxDecodeTokens: 2 }, 0],
  // 2,048 tokens are stored, yet it reads nothing; it stores its own second half.
  [{ promptTokens: LOAD_OPTIONS_PROMPT, maxDecodeTokens: 2, skipReadingPrefixCache: true }, 0],
  // The second half came from the request that skipped reading: 4,095 tokens may hit, 63 chunks.
  [{ promptTokens: LOAD_OPTIONS_PROMPT, maxDecodeTokens: 2 }, 63],
  // 1,000 tokens rounded down to whole 64-token chunks: 15.
  [{ promptTokens: LOAD_OPTIONS_PROMPT, maxDecodeTokens: 2, maxLoadTokens: 1000 }, 15],
  [{ promptTokens: LOAD_OPTIONS_PROMPT, maxDecodeTokens: 2, maxLoadTokens: 0 }, 0],
  // A cap beyond the prompt changes nothing.
  [{ promptTokens: LOAD_OPTIONS_PROMPT, maxDecodeTokens: 2, maxLoadTokens: 1 << 30 }, 63],
];

/** Fields and values every door refuses, each naming the field. */
export const BAD_LOAD_OPTIONS: readonly [Record<string, unknown>, RegExp][] = [
  [{ maxLoadTokens: -1 }, /maxLoadTokens/],
  [{ maxLoadTokens: 1.5 }, /maxLoadTokens/],
  [{ maxLoadTokens: '64' }, /maxLoadTokens/],
  [{ maxLoadTokens: 2 ** 31 }, /maxLoadTokens/],
  [{ skipReadingPrefixCache: 'yes' }, /skipReadingPrefixCache/],
  [{ skipReadingPrefixCache: 1 }, /skipReadingPrefixCache/],
];
