// Record opcodes on the rings (see src/runtime/thread-words.ts RINGS). Each record's
// first word is its opcode; the rest is documented beside each constant.

// submit ring (main -> scheduler)
/** [SUBMIT, requestId, promptLength, prefixId, sharedPrefixTokens, maxDecodeTokens, abortAfterTokens, explicitCount, ...tokens, (maxLoadTokens, skipReadingPrefixCache 0|1)?] (-1 = unset; the last two words may be absent: no load limits) */
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
/** [LOOKUP, tag, numTokens, flags (force, skip reading), maxLoadTokens or UNSET, (key lo, key hi) per chunk per group (group-major)]: see lookup-record.ts */
export const OP_LOOKUP = 30;
/** [LOAD, tag, hitChunks, (block) per loaded chunk position ...] see store-loop */
export const OP_LOAD = 31;
/** [UNLOCK, tag]: the scheduler will not load a looked-up hit after all; release its protection. */
export const OP_UNLOCK = 32;

// storeAnswer ring (store -> scheduler)
/** [LOOKED_UP, tag, hitChunks]; hitChunks is LOOKUP_DEFERRED when a pending entry decides it (ask again later). */
export const ANS_LOOKED_UP = 40;
export const LOOKUP_DEFERRED = -1;
/** [LOADED, tag, ok] */
export const ANS_LOADED = 41;

/** Sentinel for an unset optional field in a record. */
export const UNSET = -1;
