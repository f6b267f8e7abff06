// Main's side of the submit ring (main -> scheduler): a submission's record,
// and a queue for the records a full ring refused, pushed oldest first at the
// next flush. Main never waits on shared memory: whoever owns the queue
// retries on its own clock (OffloadRuntime on a timer, the runtime fuzz target
// on its virtual one) every SUBMIT_RETRY_MS while records are queued.
import type { Config } from '../config.js';
import type { Doorbell } from './doorbell.js';
import type { RequestInput } from './request-rules.js';
import { OP_SUBMIT, UNSET, pushText } from './protocol.js';
import type { SpscRing } from './rings.js';
import { RINGS } from './thread-words.js';

/** Largest submit ring (16 MiB); a bigger explicit prompt is refused by submit(). */
export const SUBMIT_RING_WORDS_MAX = 1 << 22;

/** How long main waits before it pushes queued records again (the ring was full). */
export const SUBMIT_RETRY_MS = 1;

/**
 * Submit ring capacity: room for the largest record submit() can send (an
 * explicit prompt of maxTokensPerRequest - 1 tokens, its 8 header words and
 * the 2 load-limit words) since a ring record holds at most half the ring,
 * but not below the default and not above SUBMIT_RING_WORDS_MAX.
 */
export function submitRingWords(config: Pick<Config, 'maxTokensPerRequest'>): number {
  const recordWords = 8 + (config.maxTokensPerRequest - 1) + 2;
  let words: number = RINGS.submit.words;
  while (words < SUBMIT_RING_WORDS_MAX && (words >> 1) - 1 < recordWords) words *= 2;
  return words;
}

/** One submission, every field resolved (UNSET where a limit is absent). */
export interface SubmitFields {
  readonly requestId: number;
  readonly promptLength: number;
  readonly prefixId: number;
  readonly sharedPrefixTokens: number;
  readonly maxDecodeTokens: number;
  readonly abortAfterTokens: number;
  /** The prompt's tokens when given explicitly (then promptLength is their count). */
  readonly promptTokens?: ArrayLike<number>;
  readonly maxLoadTokens?: number;
  readonly skipReadingPrefixCache?: boolean;
  /** The request's cache salt (already checked): its keys are its own. */
  readonly cacheSalt?: string;
}

/** The submission's record (protocol.ts, OP_SUBMIT); the load limits only when given or before a salt. */
export function encodeSubmit(f: SubmitFields): number[] {
  const tokens = f.promptTokens;
  const record = [
    OP_SUBMIT,
    f.requestId,
    f.promptLength,
    f.prefixId,
    f.sharedPrefixTokens,
    f.maxDecodeTokens,
    f.abortAfterTokens,
    tokens?.length ?? 0,
  ];
  if (tokens) for (let i = 0; i < tokens.length; i += 1) record.push(tokens[i]!);
  if (
    f.maxLoadTokens !== undefined ||
    f.skipReadingPrefixCache === true ||
    f.cacheSalt !== undefined
  ) {
    record.push(f.maxLoadTokens ?? UNSET, f.skipReadingPrefixCache === true ? 1 : 0);
  }
  if (f.cacheSalt !== undefined) pushText(record, f.cacheSalt);
  return record;
}

export class SubmitQueue {
  private readonly ring: SpscRing;
  private readonly bell: Doorbell;
  private readonly records: number[][] = [];

  constructor(ring: SpscRing, bell: Doorbell) {
    this.ring = ring;
    this.bell = bell;
  }

  /** Records waiting for room on the ring. */
  get queued(): number {
    return this.records.length;
  }

  enqueue(record: number[]): void {
    this.records.push(record);
  }

  /** Pushes what fits, oldest first, and rings the scheduler; the records pushed. */
  flush(): number {
    let n = 0;
    while (this.records.length > 0 && this.ring.push(this.records[0]!)) {
      this.records.shift();
      n += 1;
    }
    this.bell.ring();
    return n;
  }
}

/** A submission's record, with submit()'s defaults: a prefixId alone shares the whole prompt. */
export function encodeRequest(req: RequestInput, requestId: number): number[] {
  const length = req.promptTokens?.length ?? req.promptLength!;
  return encodeSubmit({
    requestId,
    promptLength: length,
    prefixId: req.prefixId ?? UNSET,
    sharedPrefixTokens: req.sharedPrefixTokens ?? (req.prefixId !== undefined ? length : 0),
    maxDecodeTokens: req.maxDecodeTokens ?? UNSET,
    abortAfterTokens: req.abortAfterTokens ?? UNSET,
    ...(req.promptTokens ? { promptTokens: req.promptTokens } : {}),
    ...(req.maxLoadTokens !== undefined ? { maxLoadTokens: req.maxLoadTokens } : {}),
    ...(req.skipReadingPrefixCache === true ? { skipReadingPrefixCache: true } : {}),
    ...(req.cacheSalt !== undefined ? { cacheSalt: req.cacheSalt } : {}),
  });
}
