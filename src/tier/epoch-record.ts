// The scope's epoch record, as a disk or Redis level stores it, and what a
// level may believe of it. A shared reset moves the epoch; every entry
// carries the epoch it was written under, and one of another epoch is
// retired. So whoever can write the record can undo a reset (put the old
// epoch back: retired KV is served again) or make every level use an epoch
// of their choosing. With the deployment secret the record is authenticated
// like an entry and numbered:
//
//   record = <epoch: 16 hex> "." <sequence: decimal> "." <tag: 64 hex>
//   tag    = HMAC-SHA256(secret, label | scope | epoch | sequence)
//
// A level refuses (and counts) a record whose tag is wrong or missing, one
// whose sequence is below the highest it has seen (an older genuine record
// put back), and a record gone after it had seen one. Until it has read a
// record it may trust it serves nothing and stores nothing. Without a secret
// the record is the epoch's 16 hex digits, as before, and nothing is refused
// but garbage. What no record can show: a process that never saw the newer
// record, given an older genuine one, takes it (the store holds nothing
// newer to compare with); docs/tiers.md says so.
import { timingSafeEqual } from 'node:crypto';
import type { EntryAuth } from './entry-auth.js';
import { hex16 } from './value.js';

const LABEL = 'kvoff epoch record v1';
/** Longest record text a level reads (anything longer is not one). */
export const EPOCH_RECORD_CHARS_MAX = 128;

export interface EpochRecord {
  readonly epoch: bigint;
  /** 0 before any shared reset; each reset stores the highest it saw plus one. */
  readonly sequence: number;
}

function tagOf(auth: EntryAuth, scope: bigint, r: EpochRecord): Buffer {
  return auth.tagOfText(`${LABEL}|${hex16(scope)}|${hex16(r.epoch)}|${r.sequence}`);
}

/** The record's text for `scope` (authenticated when `auth` is given). */
function sealEpochRecord(r: EpochRecord, scope: bigint, auth: EntryAuth | undefined): string {
  if (auth === undefined) return hex16(r.epoch);
  return `${hex16(r.epoch)}.${r.sequence}.${tagOf(auth, scope, r).toString('hex')}`;
}

/** The record `text` holds, or undefined when it is not one this level may believe. */
function openEpochRecord(
  text: string,
  scope: bigint,
  auth: EntryAuth | undefined,
): EpochRecord | undefined {
  if (auth === undefined) {
    return /^[0-9a-f]{16}$/.test(text) ? { epoch: BigInt('0x' + text), sequence: 0 } : undefined;
  }
  const m = /^([0-9a-f]{16})\.(0|[1-9][0-9]{0,14})\.([0-9a-f]{64})$/.exec(text);
  if (m === null) return undefined;
  const r = { epoch: BigInt('0x' + m[1]!), sequence: Number(m[2]!) };
  return timingSafeEqual(tagOf(auth, scope, r), Buffer.from(m[3]!, 'hex')) ? r : undefined;
}

/** What a level believes of its scope's epoch record, as it reads it again and again. */
export class EpochBelief {
  /** The record believed now (epoch 0, sequence 0 before any). */
  current: EpochRecord = { epoch: 0n, sequence: 0 };
  /**
   * False while a level with a secret has read no record it may believe (a
   * forged one at start): it serves and stores nothing meanwhile.
   */
  trusted: boolean;
  /** A record was believed (so a record gone is a rollback, not a scope without resets). */
  private seen = false;

  constructor(
    private readonly scope: bigint,
    private readonly auth: EntryAuth | undefined,
  ) {
    this.trusted = true;
  }

  /**
   * Takes what the store holds now (`null`: no record) and answers whether
   * the epoch moved, stayed, or the record was refused (the belief is kept).
   */
  observe(text: string | null): 'moved' | 'same' | 'refused' {
    let next: EpochRecord | undefined;
    if (text === null) {
      // No record: no shared reset yet, unless one was seen (then it was removed).
      next = this.seen && this.auth !== undefined ? undefined : { epoch: 0n, sequence: 0 };
    } else {
      next = openEpochRecord(text, this.scope, this.auth);
      if (next !== undefined && next.sequence < this.current.sequence) next = undefined;
    }
    if (next === undefined) {
      if (!this.seen && this.auth !== undefined) this.trusted = false;
      return 'refused';
    }
    this.seen = this.seen || text !== null;
    this.trusted = true;
    const moved = next.epoch !== this.current.epoch;
    this.current = next;
    return moved ? 'moved' : 'same';
  }

  /** The record a shared reset stores now: a new epoch, numbered past every one seen. */
  next(epoch: bigint): EpochRecord {
    return { epoch, sequence: this.current.sequence + 1 };
  }

  /** The level stored `r` itself. */
  stored(r: EpochRecord): void {
    this.current = r;
    this.seen = true;
    this.trusted = true;
  }

  text(r: EpochRecord): string {
    return sealEpochRecord(r, this.scope, this.auth);
  }
}
