// The stored form of one chunk below the host tier: a fixed 72-byte header,
// then the chunk's bytes. The header names everything a reader must check
// before it may serve a byte: the format (magic, version), the scope the bytes
// belong to (a fingerprint of the layout, the namespace and the key hash, so
// other models and incompatible layouts never share entries), the epoch of the
// scope when it was written (a shared reset moves the epoch and retires every
// older entry), the chunk's whole 256-bit identity (tiers name entries by its
// 64-bit key word; a second chunk whose key word collides is told apart here),
// the payload length and a CRC-32 over header and payload. Disk files and
// Redis values carry the same bytes, so one encoder and one checker serve both
// levels.
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import type { Config } from '../config.js';
import { invariant } from '../errors.js';
import { identityBytes, keyWord, readIdentity } from '../identity.js';
import type { LowerTierSwitches, TierCounters } from './lower.js';

/** "KVOF" as a big-endian u32. */
const VALUE_MAGIC = 0x4b564f46;
/** 2: identity, scope and epoch in the header (1 had a 64-bit key and a layout fingerprint only). */
const VALUE_VERSION = 2;
export const VALUE_HEADER_BYTES = 72;

// Header fields, little-endian: magic u32 | version u16 | reserved u16 |
// scope u64 | epoch u64 | identity 32 bytes (key word first) |
// payload length u64 | reserved u32 | crc32 u32.
const AT_MAGIC = 0;
const AT_VERSION = 4;
const AT_SCOPE = 8;
const AT_EPOCH = 16;
const AT_IDENTITY = 24;
const AT_LENGTH = 56;
const AT_CRC = 68;

/**
 * 64 bits of SHA-256 over what decides whose entries a tier level holds: the
 * format version, the layout (groups' kind, tokens per block and window,
 * blocks per chunk, tokens per hash, bytes per block), the namespace and the
 * key hash. Two runtimes share entries exactly when these agree; the scope
 * names their directory and Redis prefix and is in every header.
 */
export function tierScope(config: Config): bigint {
  const ns = config.namespace;
  const canonical = JSON.stringify({
    v: VALUE_VERSION,
    groups: config.groups.map((g) => [g.kind, g.tokensPerBlock, g.windowChunks]),
    blocksPerChunk: config.blocksPerChunk,
    tokensPerHash: config.tokensPerHash,
    bytesPerBlock: config.bytesPerBlock,
    namespace:
      ns === null
        ? null
        : [ns.model, ns.revision ?? null, ns.adapter ?? null, ns.dtype ?? null, ns.extra ?? null],
    keyHash: config.keyHash,
  });
  return createHash('sha256').update(canonical).digest().readBigUInt64BE(0);
}

/** 16 lower-case hex digits of a 64-bit value: the spelling of key words, scopes and epochs in names. */
export function hex16(v: bigint): string {
  return v.toString(16).padStart(16, '0');
}

/** The name part of an offload key: its key word in hex. */
export function keyName(key: bigint): string {
  return hex16(keyWord(key));
}

/**
 * A buffer of header + `payloadBytes`, with the payload area left for the
 * caller to fill (one copy from the host slot); seal it with sealValue.
 */
function allocValue(payloadBytes: number): Buffer {
  return Buffer.allocUnsafe(VALUE_HEADER_BYTES + payloadBytes);
}

/** Writes the header of a value whose payload is already in place. */
export function sealValue(value: Buffer, scope: bigint, key: bigint, epoch = 0n): Buffer {
  invariant(value.length >= VALUE_HEADER_BYTES, 'a value has room for its header');
  value.writeUInt32LE(VALUE_MAGIC, AT_MAGIC);
  value.writeUInt16LE(VALUE_VERSION, AT_VERSION);
  value.writeUInt16LE(0, AT_VERSION + 2);
  value.writeBigUInt64LE(scope, AT_SCOPE);
  value.writeBigUInt64LE(epoch, AT_EPOCH);
  identityBytes(key, value, AT_IDENTITY);
  value.writeBigUInt64LE(BigInt(value.length - VALUE_HEADER_BYTES), AT_LENGTH);
  value.writeUInt32LE(0, AT_CRC - 4);
  value.writeUInt32LE(checksum(value), AT_CRC);
  return value;
}

/** Header + a copy of `payload`. */
export function encodeValue(scope: bigint, key: bigint, payload: Uint8Array, epoch = 0n): Buffer {
  const value = allocValue(payload.length);
  value.set(payload, VALUE_HEADER_BYTES);
  return sealValue(value, scope, key, epoch);
}

/**
 * Why a value may not be served. 'identity': a whole, current entry of
 * another chunk whose key word collides with the one asked for (a miss,
 * counted as a key collision; the entry is someone else's and stays).
 * 'epoch': written before the scope's last shared reset (retired). 'key': an
 * entry under a name that is not its key word's (misplaced). The rest: not a
 * readable entry of this format and scope.
 */
type ValueRefusal =
  'short' | 'magic' | 'version' | 'scope' | 'length' | 'crc' | 'epoch' | 'key' | 'identity';

export type ValueCheck =
  | { readonly ok: true; readonly payload: Buffer }
  | { readonly ok: false; readonly reason: ValueRefusal };

/**
 * Checks a value read back from a level against what the reader asked for:
 * the format, the scope, the length and the CRC first (is it a sound entry of
 * ours?), then the epoch (is it current?), then the whole identity (is it the
 * chunk asked for?). Anything but ok means the entry must not be served.
 */
export function checkValue(
  value: Uint8Array,
  scope: bigint,
  key: bigint,
  payloadBytes: number,
  epoch = 0n,
  /** Test-only (failure class F11): skip the CRC, so a corrupted payload is served. */
  unsafeSkipChecksum = false,
  /** Test-only: compare only the key word, so a colliding entry is served (see Config.unsafeKeyBits). */
  unsafeKeyWordOnly = false,
): ValueCheck {
  if (value.length < VALUE_HEADER_BYTES) return { ok: false, reason: 'short' };
  const b = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (b.readUInt32LE(AT_MAGIC) !== VALUE_MAGIC) return { ok: false, reason: 'magic' };
  if (b.readUInt16LE(AT_VERSION) !== VALUE_VERSION) return { ok: false, reason: 'version' };
  if (b.readBigUInt64LE(AT_SCOPE) !== scope) return { ok: false, reason: 'scope' };
  const length = b.readBigUInt64LE(AT_LENGTH);
  if (length !== BigInt(payloadBytes) || b.length !== VALUE_HEADER_BYTES + payloadBytes) {
    return { ok: false, reason: 'length' };
  }
  if (!unsafeSkipChecksum && b.readUInt32LE(AT_CRC) !== checksum(b)) {
    return { ok: false, reason: 'crc' };
  }
  if (b.readBigUInt64LE(AT_EPOCH) !== epoch) return { ok: false, reason: 'epoch' };
  const stored = readIdentity(b, AT_IDENTITY);
  if (keyWord(stored) !== keyWord(key)) return { ok: false, reason: 'key' };
  if (stored !== key && !unsafeKeyWordOnly) return { ok: false, reason: 'identity' };
  return { ok: true, payload: b.subarray(VALUE_HEADER_BYTES) };
}

/** What a level checks a value read back against: the scope and layout it serves. */
export interface ValueLayout {
  readonly scope: bigint;
  readonly payloadBytes: number;
}

/**
 * The checked read of every level below the host tier, for a value read back
 * for `key` under the level's current `epoch`: the payload, counted as a hit;
 * 'collision', counted as a key collision and a miss (a sound, current entry
 * of another chunk under the same key word: someone else's, left in place);
 * or 'refused', counted as a miss and as retired (another epoch) or an error
 * (anything else): the caller deletes the entry. Never a byte of a refused value.
 */
export function checkedPayload(
  value: Buffer,
  key: bigint,
  layout: ValueLayout,
  epoch: bigint,
  counters: TierCounters,
  /** Test-only: see LowerTierSwitches (unsafeSkipChecksum, unsafeKeyWordOnly). */
  switches: LowerTierSwitches = {},
): Buffer | 'collision' | 'refused' {
  const check = checkValue(
    value,
    layout.scope,
    key,
    layout.payloadBytes,
    epoch,
    switches.unsafeSkipChecksum,
    switches.unsafeKeyWordOnly,
  );
  if (!check.ok) {
    counters.missChunks += 1;
    if (check.reason === 'identity') {
      counters.keyCollisions += 1;
      return 'collision';
    }
    if (check.reason === 'epoch') counters.retiredChunks += 1;
    else counters.errors += 1;
    return 'refused';
  }
  counters.hitChunks += 1;
  counters.bytesRead += value.length;
  return check.payload;
}

/** CRC-32 over the header up to (not including) the CRC word, then the payload. */
function checksum(value: Buffer): number {
  const head = crc32(value.subarray(0, AT_CRC));
  return crc32(value.subarray(VALUE_HEADER_BYTES), head);
}
