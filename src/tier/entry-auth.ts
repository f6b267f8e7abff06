// Authenticated lower-tier entries. A CRC catches accidents, not an
// adversary: anyone who can write to a shared Redis Cluster (or the cache
// directory) can store a well-formed value with a recomputed CRC, and every
// engine would load it as KV. With a deployment secret, each value ends in an
// HMAC-SHA256 tag over everything before it — the whole header (whatever
// identity fields it carries) and the payload — and a reader checks the tag,
// in constant time, before it looks at a byte of the value. A value whose tag
// is wrong or missing is never served.
//
//   value = header | payload | tag (32 bytes) ;  tag = HMAC-SHA256(secret, header | payload)
//
// The header (src/tier/value.ts) holds the scope, the epoch and the chunk's
// whole 256-bit identity, so none of them can be changed either: not an old
// entry relabelled with the epoch of the last shared reset, not another
// model's entry relabelled with this scope, not one chunk's entry relabelled
// as another's. The secret also names its own namespace: keyId (64 bits of an
// HMAC of a fixed label, which reveals nothing about the secret) is mixed into
// the scope, so deployments with different secrets, or with none, never read,
// count as forged, or delete each other's entries.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { InvalidArgumentError } from '../errors.js';
import type { LowerTierSwitches, TierCounters } from './lower.js';
import { VALUE_HEADER_BYTES, checkedPayload, sealValue } from './value.js';
import type { ValueLayout } from './value.js';

/** Bytes of the tag at the end of an authenticated value. */
export const ENTRY_TAG_BYTES = 32;
/** A shorter secret is refused: 128 bits is the least an HMAC key should carry. */
const TIER_SECRET_BYTES_MIN = 16;

const KEY_ID_LABEL = 'kvoff tier key id v1';

export class EntryAuth {
  /** 64 bits naming the secret (see the file comment). */
  readonly keyId: bigint;
  private readonly secret: Buffer;

  constructor(secret: string | Uint8Array) {
    const bytes =
      typeof secret === 'string'
        ? Buffer.from(secret, 'utf8')
        : secret instanceof Uint8Array
          ? Buffer.from(secret)
          : undefined;
    // The message names the rule, never the value.
    if (bytes === undefined) {
      throw new InvalidArgumentError('tiers.secret', 'must be a string or bytes');
    }
    if (bytes.length < TIER_SECRET_BYTES_MIN) {
      throw new InvalidArgumentError(
        'tiers.secret',
        `must be at least ${TIER_SECRET_BYTES_MIN} bytes (e.g. openssl rand -hex 32)`,
      );
    }
    this.secret = bytes;
    this.keyId = createHmac('sha256', bytes).update(KEY_ID_LABEL).digest().readBigUInt64BE(0);
  }

  /** Writes the tag of everything before the last ENTRY_TAG_BYTES into them. */
  sign(value: Buffer): Buffer {
    const body = value.length - ENTRY_TAG_BYTES;
    this.tagOf(value.subarray(0, body)).copy(value, body);
    return value;
  }

  /** The value without its tag when the tag is right; undefined when it is wrong or missing. */
  open(value: Uint8Array): Buffer | undefined {
    if (value.length < ENTRY_TAG_BYTES) return undefined;
    const b = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    const body = b.subarray(0, b.length - ENTRY_TAG_BYTES);
    const tag = b.subarray(b.length - ENTRY_TAG_BYTES);
    return timingSafeEqual(this.tagOf(body), tag) ? body : undefined;
  }

  /**
   * The tag of a short text under the secret (the epoch record's; its label
   * and length keep it apart from any entry's header and payload).
   */
  tagOfText(text: string): Buffer {
    return createHmac('sha256', this.secret).update(text, 'utf8').digest();
  }

  private tagOf(body: Buffer): Buffer {
    return createHmac('sha256', this.secret).update(body).digest();
  }
}

/** Bytes of a stored value: header, payload, and the tag when entries are authenticated. */
export function entryBytes(payloadBytes: number, auth: EntryAuth | undefined): number {
  return VALUE_HEADER_BYTES + payloadBytes + (auth ? ENTRY_TAG_BYTES : 0);
}

/**
 * Seals a value of entryBytes() whose payload is in place: the header
 * (value.ts), then the tag over header and payload.
 */
export function sealEntry(
  value: Buffer,
  scope: bigint,
  key: bigint,
  epoch: bigint,
  auth: EntryAuth | undefined,
): Buffer {
  if (auth === undefined) return sealValue(value, scope, key, epoch);
  sealValue(value.subarray(0, value.length - ENTRY_TAG_BYTES), scope, key, epoch);
  return auth.sign(value);
}

/**
 * The checked read of every level below the host tier, with the tag first
 * (when entries are authenticated): checkedPayload's answer for a value read
 * back for `key` under the level's `epoch` (the payload, 'collision' or
 * 'refused'); 'refused', counted as an error, a miss and an authFailure, when
 * the tag is wrong or missing. No byte of a value is looked at before its tag
 * is checked.
 */
export function checkedEntry(
  value: Buffer,
  key: bigint,
  layout: ValueLayout,
  epoch: bigint,
  counters: TierCounters,
  auth: EntryAuth | undefined,
  /** Test-only: see LowerTierSwitches (unsafeSkipChecksum also skips the tag). */
  switches: LowerTierSwitches = {},
): Buffer | 'collision' | 'refused' {
  if (auth === undefined) return checkedPayload(value, key, layout, epoch, counters, switches);
  const body = switches.unsafeSkipChecksum
    ? value.subarray(0, Math.max(0, value.length - ENTRY_TAG_BYTES))
    : auth.open(value);
  if (body === undefined) {
    counters.errors += 1;
    counters.authFailures += 1;
    counters.missChunks += 1;
    return 'refused';
  }
  const payload = checkedPayload(body, key, layout, epoch, counters, switches);
  if (typeof payload !== 'string') counters.bytesRead += ENTRY_TAG_BYTES;
  return payload;
}

/**
 * The scope entries are stored under: tierScope's, mixed with the secret's
 * key id when entries are authenticated (a namespace per secret).
 */
export function entryScope(scope: bigint, auth: EntryAuth | undefined): bigint {
  return auth === undefined ? scope : scope ^ auth.keyId;
}

/** The Redis level without a secret and without `insecure`: refused before anything starts. */
export function unauthenticatedRedisRefused(): InvalidArgumentError {
  return new InvalidArgumentError(
    'tiers.redis',
    'values must be authenticated: give tiers.secret (KVOFF_TIER_SECRET or --tier-secret-file), ' +
      'or insecure: true (--insecure-tier) to run without it',
  );
}
