// The stored form of one chunk below the host tier: a fixed 40-byte header,
// then the chunk's bytes. The header names everything a reader must check
// before it may serve a byte: the format (magic, version), the layout the
// bytes were written under (a fingerprint of the geometry, so incompatible
// configurations never share entries), the offload key, the payload length and
// a CRC-32 over header and payload. Disk files and Redis values carry the same
// bytes, so one encoder and one checker serve both levels.
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import type { Config } from '../config.js';
import { invariant } from '../errors.js';
import type { TierCounters } from './lower.js';

/** "KVOF" as a big-endian u32. */
const VALUE_MAGIC = 0x4b564f46;
const VALUE_VERSION = 1;
export const VALUE_HEADER_BYTES = 40;

// Header fields, little-endian: magic u32 | version u16 | reserved u16 |
// fingerprint u64 | key u64 | payload length u64 | reserved u32 | crc32 u32.
const AT_MAGIC = 0;
const AT_VERSION = 4;
const AT_FINGERPRINT = 8;
const AT_KEY = 16;
const AT_LENGTH = 24;
const AT_CRC = 36;

/**
 * 64 bits of SHA-256 over the layout that decides what a chunk's bytes mean:
 * groups (kind, tokens per block, window), blocks per chunk, tokens per hash
 * and bytes per block. Two runtimes share entries exactly when these agree.
 */
export function layoutFingerprint(config: Config): bigint {
  const canonical = JSON.stringify({
    v: VALUE_VERSION,
    groups: config.groups.map((g) => [g.kind, g.tokensPerBlock, g.windowChunks]),
    blocksPerChunk: config.blocksPerChunk,
    tokensPerHash: config.tokensPerHash,
    bytesPerBlock: config.bytesPerBlock,
  });
  return createHash('sha256').update(canonical).digest().readBigUInt64BE(0);
}

/** 16 lower-case hex digits: the spelling of keys and fingerprints in file names and Redis keys. */
export function hex16(v: bigint): string {
  return v.toString(16).padStart(16, '0');
}

/** Writes the header of a value whose payload is already in place. */
export function sealValue(value: Buffer, fingerprint: bigint, key: bigint): Buffer {
  invariant(value.length >= VALUE_HEADER_BYTES, 'a value has room for its header');
  value.writeUInt32LE(VALUE_MAGIC, AT_MAGIC);
  value.writeUInt16LE(VALUE_VERSION, AT_VERSION);
  value.writeUInt16LE(0, AT_VERSION + 2);
  value.writeBigUInt64LE(fingerprint, AT_FINGERPRINT);
  value.writeBigUInt64LE(key, AT_KEY);
  value.writeBigUInt64LE(BigInt(value.length - VALUE_HEADER_BYTES), AT_LENGTH);
  value.writeUInt32LE(0, AT_CRC - 4);
  value.writeUInt32LE(checksum(value), AT_CRC);
  return value;
}

/** Header + a copy of `payload`. */
export function encodeValue(fingerprint: bigint, key: bigint, payload: Uint8Array): Buffer {
  const value = Buffer.allocUnsafe(VALUE_HEADER_BYTES + payload.length);
  value.set(payload, VALUE_HEADER_BYTES);
  return sealValue(value, fingerprint, key);
}

export type ValueCheck =
  | { readonly ok: true; readonly payload: Buffer }
  | {
      readonly ok: false;
      readonly reason: 'short' | 'magic' | 'version' | 'fingerprint' | 'key' | 'length' | 'crc';
    };

/**
 * Checks a value read back from a level against what the reader asked for.
 * Anything but ok means the entry must not be served (and should be deleted).
 */
export function checkValue(
  value: Uint8Array,
  fingerprint: bigint,
  key: bigint,
  payloadBytes: number,
  /** Test-only (failure class F11): skip the CRC, so a corrupted payload is served. */
  unsafeSkipChecksum = false,
): ValueCheck {
  if (value.length < VALUE_HEADER_BYTES) return { ok: false, reason: 'short' };
  const b = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (b.readUInt32LE(AT_MAGIC) !== VALUE_MAGIC) return { ok: false, reason: 'magic' };
  if (b.readUInt16LE(AT_VERSION) !== VALUE_VERSION) return { ok: false, reason: 'version' };
  if (b.readBigUInt64LE(AT_FINGERPRINT) !== fingerprint) {
    return { ok: false, reason: 'fingerprint' };
  }
  if (b.readBigUInt64LE(AT_KEY) !== key) return { ok: false, reason: 'key' };
  const length = b.readBigUInt64LE(AT_LENGTH);
  if (length !== BigInt(payloadBytes) || b.length !== VALUE_HEADER_BYTES + payloadBytes) {
    return { ok: false, reason: 'length' };
  }
  if (!unsafeSkipChecksum && b.readUInt32LE(AT_CRC) !== checksum(b)) {
    return { ok: false, reason: 'crc' };
  }
  return { ok: true, payload: b.subarray(VALUE_HEADER_BYTES) };
}

/** What a level checks a value read back against: the layout it serves. */
export interface ValueLayout {
  readonly fingerprint: bigint;
  readonly payloadBytes: number;
}

/**
 * The checked read of every level below the host tier: the payload of a value
 * read back for `key`, counted as a hit; or undefined, counted as an error and
 * a miss, when it must not be served (the caller then deletes the entry).
 */
export function checkedPayload(
  value: Buffer,
  key: bigint,
  layout: ValueLayout,
  counters: TierCounters,
  /** Test-only (failure class F11): skip the CRC, so a corrupted payload is served. */
  unsafeSkipChecksum = false,
): Buffer | undefined {
  const check = checkValue(value, layout.fingerprint, key, layout.payloadBytes, unsafeSkipChecksum);
  if (!check.ok) {
    counters.errors += 1;
    counters.missChunks += 1;
    return undefined;
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
