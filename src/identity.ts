// Whose KV is it: the namespace a runtime's entries belong to, the per-request
// cache salt, the tagged encoding both enter the key chain through, and the
// 256-bit chunk identity (the "offload key") every tier compares before it
// serves a byte. docs/design.md ("Hashing") gives the whole scheme.
//
// Every field is tagged and length-prefixed (tag u8, length u32 LE, bytes), so
// no two different inputs encode alike: an adapter named "x" and a salt "x"
// differ in their tags (vLLM #44701 appended extras untagged and they
// collided), an absent field is no field at all, and a field's bytes can never
// run into the next one's.
import { createHash } from 'node:crypto';
import { ConfigError, InvalidArgumentError } from './errors.js';

/** The key hash: SHA-256 by default; xxHash64 only as a documented opt-in for one trusted process. */
export type KeyHash = 'sha256' | 'xxh64';
export const KEY_HASHES: readonly KeyHash[] = ['sha256', 'xxh64'];

/** Bytes of a chained block digest as kept in shared memory (an xxHash64 uses the first 8). */
export const DIGEST_BYTES = 32;

/** Longest cache salt, in UTF-8 bytes (a tenant id or a hash of one; vLLM's is any non-empty string). */
export const CACHE_SALT_BYTES_MAX = 256;
/** Longest namespace field, in UTF-8 bytes. */
export const NAMESPACE_FIELD_BYTES_MAX = 1024;

/**
 * Who made the KV: the model (required once a namespace is given), its
 * revision, a LoRA adapter, the KV dtype and anything else that changes the
 * bytes (`extra`). Two runtimes share entries exactly when their namespaces
 * and layouts agree, so a deployment names what its KV depends on.
 */
export interface NamespaceInput {
  model: string;
  revision?: string;
  adapter?: string;
  dtype?: string;
  extra?: string;
}

export type Namespace = Readonly<NamespaceInput>;

/** Field order and tags of the namespace in the root encoding. */
const NAMESPACE_FIELDS = [
  ['model', 0x10],
  ['revision', 0x11],
  ['adapter', 0x12],
  ['dtype', 0x13],
  ['extra', 0x14],
] as const;

const TAG_DOMAIN = 0x01;
const TAG_KEY_HASH = 0x02;
const TAG_SALT = 0x20;
const ROOT_DOMAIN = 'kvoff/root/v2';

/** A resolved, frozen namespace, or null for none; ConfigError names the bad field. */
export function resolveNamespace(input: unknown): Namespace | null {
  if (input === undefined || input === null) return null;
  if (typeof input !== 'object' || Array.isArray(input)) {
    throw new ConfigError(
      'namespace',
      'must be an object { model, revision?, adapter?, dtype?, extra? }',
    );
  }
  const raw = input as Record<string, unknown>;
  for (const k of Object.keys(raw)) {
    if (!NAMESPACE_FIELDS.some(([name]) => name === k) && raw[k] !== undefined) {
      throw new ConfigError(
        `namespace.${k}`,
        'is not a namespace field (model, revision, adapter, dtype, extra)',
      );
    }
  }
  const out: Record<string, string> = {};
  for (const [name] of NAMESPACE_FIELDS) {
    const v = raw[name];
    if (v === undefined) {
      if (name === 'model') throw new ConfigError('namespace.model', 'is required in a namespace');
      continue;
    }
    const rule = checkText(v, NAMESPACE_FIELD_BYTES_MAX);
    if (rule !== undefined) throw new ConfigError(`namespace.${name}`, rule);
    out[name] = v as string;
  }
  return Object.freeze(out as unknown as NamespaceInput);
}

/** A request's cache salt checked: undefined (no salt: its own domain) or the string; InvalidArgumentError otherwise. */
export function validateCacheSalt(salt: unknown, what = 'cacheSalt'): string | undefined {
  if (salt === undefined) return undefined;
  const rule = checkText(salt, CACHE_SALT_BYTES_MAX);
  if (rule !== undefined) throw new InvalidArgumentError(what, rule);
  return salt as string;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why a namespace field or salt is refused, or undefined when it is fine. */
function checkText(v: unknown, bytesMax: number): string | undefined {
  const rule = `must be a non-empty string of well-formed Unicode, at most ${bytesMax} UTF-8 bytes`;
  if (typeof v !== 'string' || v.length === 0) return rule;
  // A lone surrogate encodes as U+FFFD, so two different strings would encode alike.
  if (LONE_SURROGATE.test(v)) return rule;
  if (Buffer.byteLength(v, 'utf8') > bytesMax) return rule;
  return undefined;
}

/** Appends one tagged, length-prefixed field. */
function field(parts: Buffer[], tag: number, bytes: Uint8Array): void {
  const head = Buffer.allocUnsafe(5);
  head.writeUInt8(tag, 0);
  head.writeUInt32LE(bytes.length, 1);
  parts.push(head, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
}

/**
 * The 32 bytes every key chain of a request starts from (block 0's parent):
 * SHA-256 over the tagged key hash, namespace and cache salt. The namespace
 * and the salt are the first block's tagged extras, carried this way so that
 * every block digest, being chained, covers them. Computed once per request,
 * synchronously, by whoever opens it (node:crypto needs no loading).
 */
export function requestRoot(
  config: { readonly keyHash: KeyHash; readonly namespace: Namespace | null },
  cacheSalt?: string,
): Uint8Array {
  const parts: Buffer[] = [];
  field(parts, TAG_DOMAIN, Buffer.from(ROOT_DOMAIN, 'utf8'));
  field(parts, TAG_KEY_HASH, Buffer.from(config.keyHash, 'utf8'));
  const ns = config.namespace;
  if (ns !== null) {
    for (const [name, tag] of NAMESPACE_FIELDS) {
      const v = ns[name];
      if (v !== undefined) field(parts, tag, Buffer.from(v, 'utf8'));
    }
  }
  if (cacheSalt !== undefined) field(parts, TAG_SALT, Buffer.from(cacheSalt, 'utf8'));
  return createHash('sha256').update(Buffer.concat(parts)).digest();
}

// --- the chunk identity ---
//
// The identity of chunk c of group g is the digest D of its last hash block
// with the group index mixed into each of its four 64-bit words: vLLM appends
// the group index to the hash; mixing keeps 256 bits and costs no second hash
// per key. m(g) = g * 0x9E3779B97F4A7C15 mod 2^64 is a bijection of g, so the
// groups of one chunk never share an identity. Word 0 is the key word: shared
// memory keeps it in the `keys` array and tiers index and name entries by it;
// words 1-3 (192 bits) are the check beside it (`keyChecks`). As a bigint,
// identity = w0 | w1 << 64 | w2 << 128 | w3 << 192.

const MIX = 0x9e3779b97f4a7c15n;
const U64 = (1n << 64n) - 1n;

/** Little-endian bytes of m(g), for byte-wise mixing. */
export function groupMixBytes(group: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, (BigInt(group) * MIX) & U64, true);
  return out;
}

/**
 * Writes the identity of (digest at `from`, group) as its key word (8 bytes at
 * `keyAt` of `keys`) and its check (24 bytes at `checkAt` of `checks`). With
 * `keyBits` < 64 (test-only, Config.unsafeKeyBits) the key word keeps only its
 * low bits, so key words collide often while the check stays whole.
 */
export function writeIdentity(
  digests: Uint8Array,
  from: number,
  mix: Uint8Array,
  keyBits: number,
  keys: Uint8Array,
  keyAt: number,
  checks: Uint8Array,
  checkAt: number,
): void {
  for (let i = 0; i < 8; i += 1) keys[keyAt + i] = digests[from + i]! ^ mix[i]!;
  if (keyBits < 64) truncateKeyBytes(keys, keyAt, keyBits);
  for (let w = 1; w < 4; w += 1) {
    for (let i = 0; i < 8; i += 1) {
      checks[checkAt + (w - 1) * 8 + i] = digests[from + w * 8 + i]! ^ mix[i]!;
    }
  }
}

/**
 * writeIdentity over 32-bit views of the same memory, for the hasher's hot
 * path (a key per chunk of every request): 8 word XORs instead of 32 byte
 * ones. XOR commutes with how bytes group into words, so on any host the
 * bytes written equal writeIdentity's, as long as `mix` views m(g)'s bytes
 * (groupMixWords). Offsets are in words; only for a whole 64-bit key word
 * (keyBits 64: the test-only truncation takes the byte path).
 */
export function writeIdentityWords(
  digests: Int32Array,
  fromWord: number,
  mix: Int32Array,
  keys: Int32Array,
  keyAtWord: number,
  checks: Int32Array,
  checkAtWord: number,
): void {
  const m0 = mix[0]!;
  const m1 = mix[1]!;
  keys[keyAtWord] = digests[fromWord]! ^ m0;
  keys[keyAtWord + 1] = digests[fromWord + 1]! ^ m1;
  for (let w = 0; w < 6; w += 2) {
    checks[checkAtWord + w] = digests[fromWord + 2 + w]! ^ m0;
    checks[checkAtWord + w + 1] = digests[fromWord + 3 + w]! ^ m1;
  }
}

/** m(g) as the two 32-bit words of its little-endian bytes (see writeIdentityWords). */
export function groupMixWords(group: number): Int32Array {
  return new Int32Array(groupMixBytes(group).buffer);
}

function truncateKeyBytes(keys: Uint8Array, at: number, keyBits: number): void {
  for (let i = 0; i < 8; i += 1) {
    const keep = Math.max(0, Math.min(8, keyBits - i * 8));
    keys[at + i] = keys[at + i]! & ((1 << keep) - 1);
  }
}

/** The identity bigint of (digest at `from`, group); see writeIdentity. */
export function identityOf(digests: Uint8Array, from: number, group: number, keyBits = 64): bigint {
  const key = new Uint8Array(8);
  const check = new Uint8Array(24);
  writeIdentity(digests, from, groupMixBytes(group), keyBits, key, 0, check, 0);
  const kv = new DataView(key.buffer);
  const cv = new DataView(check.buffer);
  return composeIdentity(
    kv.getBigUint64(0, true),
    cv.getBigUint64(0, true),
    cv.getBigUint64(8, true),
    cv.getBigUint64(16, true),
  );
}

/** One identity from its key word and its three check words. */
export function composeIdentity(key: bigint, c1: bigint, c2: bigint, c3: bigint): bigint {
  return key | (c1 << 64n) | (c2 << 128n) | (c3 << 192n);
}

/** The key word of an identity: what tiers index and name entries by. */
export function keyWord(identity: bigint): bigint {
  return identity & U64;
}

/** The identity's 32 bytes, little-endian (word 0 first), into `out` at `at`. */
export function identityBytes(identity: bigint, out: Uint8Array, at: number): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let w = 0; w < 4; w += 1)
    v.setBigUint64(at + w * 8, (identity >> BigInt(w * 64)) & U64, true);
}

/** The identity read back from 32 little-endian bytes. */
export function readIdentity(bytes: Uint8Array, at: number): bigint {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return composeIdentity(
    v.getBigUint64(at, true),
    v.getBigUint64(at + 8, true),
    v.getBigUint64(at + 16, true),
    v.getBigUint64(at + 24, true),
  );
}
