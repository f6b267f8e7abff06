// XXH64 in plain JavaScript (BigInt), for a process without WebAssembly.
//
// kvoff hashes with xxhash-wasm. Under `node --jitless` (or
// --no-expose-wasm) there is no WebAssembly global, and no well-kept pure-JS
// package implements the 64-bit variant (js-xxhash has only xxHash32), so
// without this every thread that loads the hashing failed: LocalOffload.create
// with a ReferenceError, OffloadRuntime.start with a hasher WorkerFailedError.
// This is the reference algorithm (xxhash.h, XXH64), bit for bit: a test
// checks it against xxhash-wasm on random inputs and seeds, so keys stored by
// a --jitless process match keys looked up by any other (disk and Redis tiers
// are shared). It is many times slower; it is used only when WebAssembly is
// missing (a process-wide condition, so every thread of a process agrees).
const M = 0xffffffffffffffffn;
const P1 = 0x9e3779b185ebca87n;
const P2 = 0xc2b2ae3d27d4eb4fn;
const P3 = 0x165667b19e3779f9n;
const P4 = 0x85ebca77c2b2ae63n;
const P5 = 0x27d4eb2f165667c5n;

function rotl(x: bigint, r: bigint): bigint {
  return ((x << r) | (x >> (64n - r))) & M;
}

function round(acc: bigint, lane: bigint): bigint {
  return (rotl((acc + lane * P2) & M, 31n) * P1) & M;
}

function mergeRound(acc: bigint, v: bigint): bigint {
  return (((acc ^ round(0n, v)) * P1) & M) + P4;
}

/** XXH64 of `bytes` with `seed` (taken modulo 2^64), as an unsigned 64-bit bigint. */
export function xxh64(bytes: Uint8Array, seed: bigint): bigint {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const len = bytes.byteLength;
  const s = BigInt.asUintN(64, seed);
  let at = 0;
  let h: bigint;
  if (len >= 32) {
    let v1 = (s + P1 + P2) & M;
    let v2 = (s + P2) & M;
    let v3 = s;
    let v4 = (s - P1) & M;
    for (; at + 32 <= len; at += 32) {
      v1 = round(v1, view.getBigUint64(at, true));
      v2 = round(v2, view.getBigUint64(at + 8, true));
      v3 = round(v3, view.getBigUint64(at + 16, true));
      v4 = round(v4, view.getBigUint64(at + 24, true));
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M;
    h = mergeRound(h, v1) & M;
    h = mergeRound(h, v2) & M;
    h = mergeRound(h, v3) & M;
    h = mergeRound(h, v4) & M;
  } else {
    h = (s + P5) & M;
  }
  h = (h + BigInt(len)) & M;
  for (; at + 8 <= len; at += 8) {
    h ^= round(0n, view.getBigUint64(at, true));
    h = ((rotl(h, 27n) * P1) & M) + P4;
    h &= M;
  }
  if (at + 4 <= len) {
    h ^= (BigInt(view.getUint32(at, true)) * P1) & M;
    h = (((rotl(h, 23n) * P2) & M) + P3) & M;
    at += 4;
  }
  for (; at < len; at += 1) {
    h ^= (BigInt(bytes[at]!) * P5) & M;
    h = (rotl(h, 11n) * P1) & M;
  }
  h ^= h >> 33n;
  h = (h * P2) & M;
  h ^= h >> 29n;
  h = (h * P3) & M;
  h ^= h >> 32n;
  return h;
}
