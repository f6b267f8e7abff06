// Record opcodes on the rings (see src/runtime/thread-words.ts RINGS). Each record's
// first word is its opcode; the rest is documented beside each constant.

// submit ring (main -> scheduler)
/** [SUBMIT, requestId, promptLength, prefixId, sharedPrefixTokens, maxDecodeTokens, abortAfterTokens, explicitCount, ...tokens, (maxLoadTokens, skipReadingPrefixCache 0|1, (cache salt as text, see pushText)?)?] (-1 = unset; the tail may be absent: no load limits, no salt) */
export const OP_SUBMIT = 1;

// allocRequest ring (scheduler -> allocator)
/** [ALLOC, tag, slot, generation, (nulls, blocks) per group]: all or nothing; nulls are appended before the blocks. */
export const OP_ALLOC = 10;
/** [PREEMPT, slot, generation]: clear the block tables and free every block (pinned ones wait in quarantine). */
export const OP_PREEMPT = 11;
/** [NULL, slot, generation, group, from, to]: null positions [from, to) of a windowed group and free their blocks. */
export const OP_NULL = 12;
/** [END, tag, slot, generation]: once the store marked the generation drained, clear, free, answer RELEASED. */
export const OP_END = 13;

// allocAnswer ring (allocator -> scheduler)
/** [ALLOCATED, tag, ok, ...block IDs of every group in group order] */
export const ANS_ALLOCATED = 20;
/** [RELEASED, tag, slot, generation] */
export const ANS_RELEASED = 21;

// storeRequest ring (scheduler -> store)
/** [LOOKUP, tag, numTokens, flags (force, skip reading), maxLoadTokens or UNSET, (8 words of the 256-bit key) per chunk per group (group-major)]: see lookup-record.ts */
export const OP_LOOKUP = 30;
/** [LOAD, tag, slot, generation, (block) per loaded chunk position ...] see store-loop; the request's handle lets a hit from before a reset restart its store epoch */
export const OP_LOAD = 31;
/** [UNLOCK, tag, slot, generation]: the scheduler will not load a looked-up hit after all; release its protection (slot -1: no request opened for it). */
export const OP_UNLOCK = 32;

// storeAnswer ring (store -> scheduler)
/**
 * [LOOKED_UP, tag, hitChunks]; hitChunks is LOOKUP_DEFERRED when a pending
 * entry decides it, LOOKUP_RETRY when a tier level could not answer yet (both:
 * ask again later). [LOOKED_UP, tag, LOOKUP_FAILED, firstFailedChunk,
 * hitChunks]: a level below the host refused a chunk of the hit on its way up
 * and loadFailurePolicy is 'fail' (the request fails; nothing is locked).
 */
export const ANS_LOOKED_UP = 40;
export const LOOKUP_DEFERRED = -1;
export const LOOKUP_RETRY = -2;
export const LOOKUP_FAILED = -3;
/**
 * [LOADED, tag, ok, loadedChunks, fails]: loadedChunks is the prefix of the
 * hit every group holds soundly (the hit when ok; before the first chunk whose
 * copy failed otherwise, see loadedPrefixChunks); fails is 1 when the request
 * fails for it (loadFailurePolicy 'fail'), 0 when it recomputes from there.
 */
export const ANS_LOADED = 41;

/** Sentinel for an unset optional field in a record. */
export const UNSET = -1;

/**
 * Appends a string as [UTF-8 byte length, ...bytes packed four to a word,
 * little-endian]. For strings already checked (validateCacheSalt).
 */
export function pushText(record: number[], text: string): void {
  const bytes = Buffer.from(text, 'utf8');
  record.push(bytes.length);
  for (let at = 0; at < bytes.length; at += 4) {
    let w = 0;
    for (let i = 0; i < 4 && at + i < bytes.length; i += 1) w |= bytes[at + i]! << (8 * i);
    record.push(w | 0);
  }
}

/** Words a text of `byteLength` bytes takes after its length word. */
function textWords(byteLength: number): number {
  return Math.ceil(byteLength / 4);
}

/**
 * The text at `at` (its length word) of a record any producer may have
 * written: undefined unless the length is in [1, bytesMax], the record holds
 * exactly its words, and the bytes are well-formed UTF-8.
 */
export function readText(r: Int32Array, at: number, bytesMax: number): string | undefined {
  const n = r[at];
  if (n === undefined || n < 1 || n > bytesMax || r.length !== at + 1 + textWords(n))
    return undefined;
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i += 1) bytes[i] = (r[at + 1 + (i >> 2)]! >>> (8 * (i & 3))) & 0xff;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}
