// The bounded queue KV events leave the store thread by: one SPSC ring of Int32
// records (src/runtime/rings.ts) in its own SharedArrayBuffer, written only by
// the store thread and read only by main. A record the ring has no room for is
// dropped and counted, never waited for: the store loop never blocks on a
// subscriber. Records are raw facts (a key, its parent, the chunk's tokens);
// main builds vLLM's events from them, off the store thread.
//
//   stored   [STORED, medium, group, hasParent, key lo, key hi, parent lo, parent hi, n, ...n tokens]
//   removed  [REMOVED, medium, group, n, ...n keys as (lo, hi)]
//   cleared  [CLEARED]
import type { Config } from '../config.js';
import { invariant } from '../errors.js';
import { SpscRing } from '../runtime/rings.js';
import { MEDIA, SPEC_KIND } from './types.js';
import type { BlockStored, KvEvent, Medium } from './types.js';

const STORED = 1;
const REMOVED = 2;
const CLEARED = 3;
const STORED_HEAD_WORDS = 9;
const REMOVED_HEAD_WORDS = 4;
/** A record's group when the level does not know it. */
export const NO_GROUP = -1;

/** The smallest event ring: 4 MiB, about 14,000 default chunks (64 tokens each) between two reads. */
const EVENT_RING_WORDS_MIN = 1 << 20;
const EMPTY = new Int32Array(0);

/** Ring words for `config`: at least the minimum, and room for four records of its largest chunk. */
export function eventRingWords(config: Pick<Config, 'groups'>): number {
  const tokensMax = Math.max(...config.groups.map((g) => g.tokensPerChunk));
  let words = EVENT_RING_WORDS_MIN;
  while ((words >> 1) - 1 < 4 * (STORED_HEAD_WORDS + tokensMax)) words *= 2;
  return words;
}

function lo(k: bigint): number {
  return Number(k & 0xffffffffn) | 0;
}
function hi(k: bigint): number {
  return Number((k >> 32n) & 0xffffffffn) | 0;
}
/**
 * A key word back from its (lo, hi) pair. Events carry key words, the 64 bits
 * a tier names a chunk by, not the 256-bit identity: lo/hi keep word 0 only.
 */
function readKeyWord(r: Int32Array, at: number): bigint {
  return (BigInt(r[at + 1]! >>> 0) << 32n) | BigInt(r[at]! >>> 0);
}

/** The store thread's end: appends records, counts what went and what the full ring refused. */
export class EventQueueWriter {
  /** Events queued for main. */
  queued = 0;
  /** Events the full ring refused (lost: no subscriber will see them). */
  dropped = 0;
  private readonly ring: SpscRing;
  private readonly keysPerRecord: number;

  constructor(buffer: SharedArrayBuffer) {
    this.ring = new SpscRing(buffer);
    this.keysPerRecord = Math.floor((this.ring.recordWordsMax - REMOVED_HEAD_WORDS) / 2);
  }

  /** One chunk stored at `medium`; `tokens` are its tokens (null when not known). */
  stored(
    medium: Medium,
    group: number,
    key: bigint,
    parent: bigint | null,
    tokens: Int32Array | null,
  ): void {
    const t = tokens ?? EMPTY;
    const p = parent ?? 0n;
    const head = [STORED, MEDIA.indexOf(medium), group, parent === null ? 0 : 1];
    head.push(lo(key), hi(key), lo(p), hi(p), t.length);
    this.count(this.ring.pushParts(head, t), 1);
  }

  /** Keys that left `medium` (evicted, found bad or gone), one record per bound's worth. */
  removed(medium: Medium, group: number, keys: readonly bigint[]): void {
    for (let at = 0; at < keys.length; at += this.keysPerRecord) {
      const part = keys.slice(at, at + this.keysPerRecord);
      const record = [REMOVED, MEDIA.indexOf(medium), group, part.length];
      for (const k of part) record.push(lo(k), hi(k));
      this.count(this.ring.push(record), part.length);
    }
  }

  /** Every entry was dropped (a reset). */
  cleared(): void {
    this.count(this.ring.push([CLEARED]), 1);
  }

  private count(ok: boolean, events: number): void {
    if (ok) this.queued += events;
    else this.dropped += events;
  }
}

/**
 * Main's end: turns up to `max` records into events appended to `out`.
 * Consecutive stored chunks of one group and medium, each the parent of the
 * next, become one BlockStored (as vLLM announces a run of blocks); the
 * removals of one record are one BlockRemoved.
 */
export function readEvents(
  ring: SpscRing,
  config: Pick<Config, 'groups'>,
  out: KvEvent[],
  max: number,
): number {
  return ring.drain((r) => {
    const kind = r[0];
    if (kind === STORED) stored(r, config, out);
    else if (kind === REMOVED) {
      const keys: bigint[] = [];
      for (let i = 0; i < r[3]!; i += 1) keys.push(readKeyWord(r, REMOVED_HEAD_WORDS + 2 * i));
      out.push({
        type: 'BlockRemoved',
        blockHashes: keys,
        medium: MEDIA[r[1]!]!,
        groupIdx: group(r),
      });
    } else if (kind === CLEARED) out.push({ type: 'AllBlocksCleared' });
    else invariant(false, `event record kind ${kind} is known`);
  }, max);
}

function group(r: Int32Array): number | null {
  return r[2] === NO_GROUP ? null : r[2]!;
}

/** A BlockStored being built here: its arrays are still this module's to extend. */
type Building = BlockStored & { blockHashes: bigint[]; tokenIds: number[] };

function stored(r: Int32Array, config: Pick<Config, 'groups'>, out: KvEvent[]): void {
  const medium = MEDIA[r[1]!]!;
  const g = group(r);
  const key = readKeyWord(r, 4);
  const parent = r[3] === 1 ? readKeyWord(r, 6) : null;
  const tokens = r.subarray(STORED_HEAD_WORDS, STORED_HEAD_WORDS + r[8]!);
  const last = out[out.length - 1];
  if (
    last?.type === 'BlockStored' &&
    last.medium === medium &&
    last.groupIdx === g &&
    parent !== null &&
    last.blockHashes[last.blockHashes.length - 1] === parent &&
    last.tokenIds.length > 0 === tokens.length > 0
  ) {
    const run = last as Building;
    run.blockHashes.push(key);
    for (const t of tokens) run.tokenIds.push(t);
    return;
  }
  const spec = g === null ? undefined : config.groups[g];
  const event: Building = {
    type: 'BlockStored',
    blockHashes: [key],
    parentBlockHash: parent,
    tokenIds: Array.from(tokens),
    blockSize: tokens.length > 0 && spec ? spec.tokensPerChunk : 0,
    medium,
    groupIdx: g,
    kvCacheSpecKind: spec ? SPEC_KIND[spec.kind] : null,
    kvCacheSpecSlidingWindow: spec?.windowTokens ?? null,
  };
  out.push(event);
}
