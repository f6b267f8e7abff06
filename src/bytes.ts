// Verifiable bytes: the KV content of block `position` of the chunk named by
// `key` is a deterministic expansion of (key, position). Whoever writes a
// block (the simulated forward pass) and whoever checks a copy (tests, the
// fuzzer's oracle) call the same two functions, so any copy can be verified
// against its key without side tables.
//
// The key is the chunk's whole 256-bit identity, and every one of its bits
// enters the seed: two chunks whose key words collide (tiers index by the key
// word) still expand to different bytes, so an entry served under a colliding
// key word fails the check instead of looking right.

// mulberry32 seeded from the key's eight 32-bit words and the position: cheap,
// and different for every (key, position) in practice. The generator state
// is per thread (each worker has its own module instance).
let s = 0;

function seed(key: bigint, position: number): void {
  s = blockSeed(key, position);
}

/** The generator's seed for (key, position): what a device's kernel starts from (src/runtime/webgpu-kernels.ts). */
export function blockSeed(key: bigint, position: number): number {
  let h = Math.imul(position + 1, 0x85ebca6b);
  // Word by word, each multiplied so that equal words in different places do not cancel.
  for (let w = 0; w < 8 && key !== 0n; w += 1) {
    h = Math.imul(h ^ Number(BigInt.asUintN(32, key)), 0x9e3779b1) ^ (h >>> 15);
    key >>= 32n;
  }
  return h | 0;
}

function next(): number {
  s = (s + 0x6d2b79f5) | 0;
  let t = Math.imul(s ^ (s >>> 15), s | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return (t ^ (t >>> 14)) >>> 0;
}

/** Fills `out` (one block's words) with the expansion of (key, position). */
export function expandBlock(key: bigint, position: number, out: Uint32Array): void {
  seed(key, position);
  for (let i = 0; i < out.length; i += 1) out[i] = next();
}

/** True when `words` hold exactly the expansion of (key, position). */
export function blockMatches(key: bigint, position: number, words: Uint32Array): boolean {
  seed(key, position);
  for (let i = 0; i < words.length; i += 1) if (words[i] !== next()) return false;
  return true;
}
