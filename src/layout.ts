// Every word of shared request state, declared once: which line it lives in,
// its width, and the single role that writes it. All other modules use the
// constants exported here; no module computes a shared index of its own.
// docs/design.md ("Roles, and the single writer of each word") explains the layout.
//
// Each request slot is four lines, one per writing role, so a role only ever
// dirties its own line. With `padHotWords` each line is 16 Int32 words (one
// 64-byte cache line) so roles on different cores never false-share; without
// it the lines are packed back to back (kept only so the bench can show the
// difference).
import type { Config } from './config.js';
import { DIGEST_BYTES } from './identity.js';

/** 64-bit words of an offload key's check, beside its key word (identity.ts). */
export const KEY_CHECK_WORDS = 3;

export type Role = 'scheduler' | 'hasher' | 'allocator' | 'store' | 'transfer';

export interface FieldSpec {
  readonly name: string;
  readonly writer: Role;
  /** One word per group when true, else one word. */
  readonly perGroup: boolean;
  /** Index of the first word within its role's line. */
  readonly index: number;
  readonly doc: string;
}

/** Most groups a config may have; fixes every line's size so indices are constants. */
export const GROUPS_MAX = 8;
/** Words in a padded line: 64 bytes. */
export const LINE_WORDS = 16;
/** Bounded retries of a seqlock snapshot before the store role gives up for this pass. */
export const SNAPSHOT_RETRIES_MAX = 16;

export const Status = {
  free: 0,
  waiting: 1,
  running: 2,
  preempted: 3,
  finished: 4,
  aborted: 5,
} as const;
export type StatusCode = (typeof Status)[keyof typeof Status];
export const STATUS_NAMES = [
  'free',
  'waiting',
  'running',
  'preempted',
  'finished',
  'aborted',
] as const;

/** Sentinel for "no max-offload-tokens cap". */
export const NO_CAP = -1;

// Scheduler line: lifecycle and token progress.
export const S_GENERATION = 0;
export const S_STATUS = 1;
export const S_REQUEST_ID = 2;
export const S_PROMPT_TOKENS = 3;
export const S_NUM_TOKENS = 4;
export const S_COMPUTED_TOKENS = 5;
export const S_SCHEDULED_TOKENS = 6;
export const S_MAX_OFFLOAD_TOKENS = 7;
export const S_HIT_CHUNKS = 8; // + group
// Hasher line: block hashes and per-group offload keys.
export const H_GENERATION = 0;
export const H_HASH_COUNT = 1;
export const H_KEY_COUNT = 2; // + group
// Allocator line: per-group block IDs, under a seqlock for non-append changes.
export const A_GENERATION = 0;
export const A_SEQ = 1;
export const A_SETTLED_GENERATION = 2;
export const A_BLOCK_COUNT = 3; // + group
// Store line: cursors, their epoch and the final-pass marker.
export const T_GENERATION = 0;
export const T_DRAINED_GENERATION = 1;
export const T_EPOCH = 2;
export const T_CURSOR = 3; // + group

export const FIELDS: readonly FieldSpec[] = [
  f(
    'generation',
    'scheduler',
    false,
    S_GENERATION,
    'slot incarnation: odd while a request holds the slot, bumped on open and on release; handles carry it',
  ),
  f(
    'status',
    'scheduler',
    false,
    S_STATUS,
    'lifecycle: free, waiting, running, preempted, finished, aborted',
  ),
  f(
    'requestId',
    'scheduler',
    false,
    S_REQUEST_ID,
    "the host's numeric request id (external id mapping)",
  ),
  f('promptTokens', 'scheduler', false, S_PROMPT_TOKENS, 'prompt length in tokens'),
  f(
    'numTokens',
    'scheduler',
    false,
    S_NUM_TOKENS,
    'tokens known (prompt + sampled); publishes the token array',
  ),
  f('computedTokens', 'scheduler', false, S_COMPUTED_TOKENS, 'tokens whose KV is computed'),
  f(
    'scheduledTokens',
    'scheduler',
    false,
    S_SCHEDULED_TOKENS,
    'tokens scheduled in the current batch (async scheduling horizon)',
  ),
  f(
    'maxOffloadTokens',
    'scheduler',
    false,
    S_MAX_OFFLOAD_TOKENS,
    'cap on offloadable tokens, -1 for none',
  ),
  f(
    'hitChunks',
    'scheduler',
    true,
    S_HIT_CHUNKS,
    'chunks served by a tier load at admission; the store cursor starts there',
  ),
  f(
    'hasherGeneration',
    'hasher',
    false,
    H_GENERATION,
    'generation the hasher line belongs to; counts below are 0 for any other',
  ),
  f('hashCount', 'hasher', false, H_HASH_COUNT, 'chained block hashes published'),
  f('keyCount', 'hasher', true, H_KEY_COUNT, 'offload keys published per group'),
  f(
    'allocatorGeneration',
    'allocator',
    false,
    A_GENERATION,
    'generation the allocator line belongs to',
  ),
  f(
    'blockSeq',
    'allocator',
    false,
    A_SEQ,
    'seqlock: odd while block IDs change other than by append',
  ),
  f(
    'settledGeneration',
    'allocator',
    false,
    A_SETTLED_GENERATION,
    "set to the generation once the allocator handled the request's end: every block ID it will ever publish for it is published, and appends are refused from then on",
  ),
  f('blockCount', 'allocator', true, A_BLOCK_COUNT, 'GPU block IDs published per group'),
  f('storeGeneration', 'store', false, T_GENERATION, 'generation the store line belongs to'),
  f(
    'drainedGeneration',
    'store',
    false,
    T_DRAINED_GENERATION,
    'set to the generation once the final pass of a finished/aborted request ran',
  ),
  f(
    'storeEpoch',
    'store',
    false,
    T_EPOCH,
    "resets this generation's store state went through: a reset (vLLM's reset_cache) sets the cursors to 0 and bumps it; cursors move only forward within one (generation, storeEpoch)",
  ),
  f('cursor', 'store', true, T_CURSOR, 'index of the next chunk to store, per group'),
];

/**
 * Owner words, one per role a host program drives through role views, on one
 * line after the last slot. 0 while unclaimed; a role view claims its role
 * with compareExchange(0, its token) before its first write, and a view
 * holding another token refuses (RoleClaimedError): one writer per role, so a
 * second thread (or a second view) driving the same role is caught, not
 * silently interleaved. OWNER_CLOSED (stored by the runtime's close()) makes
 * every view refuse with ClosedError. Writers: claimants (compareExchange
 * only) and main on close.
 */
export const OWNER_ROLES = ['scheduler', 'allocator'] as const;
export type OwnedRole = (typeof OWNER_ROLES)[number];
export const OWNER_FREE = 0;
export const OWNER_CLOSED = -1;

// Arrays beyond the slot lines; the count that publishes each is named.
export const ARRAYS = [
  { name: 'tokens', writer: 'scheduler', publishedBy: 'numTokens', doc: 'token IDs per request' },
  {
    name: 'roots',
    writer: 'scheduler',
    publishedBy: 'generation',
    doc: '32 bytes per request: the root its key chain starts from (namespace and cache salt, tagged), written at open before the generation is published',
  },
  {
    name: 'hashes',
    writer: 'hasher',
    publishedBy: 'hashCount',
    doc: 'chained 32-byte block digests per request (SHA-256; an xxHash64 fills the first 8)',
  },
  {
    name: 'keys',
    writer: 'hasher',
    publishedBy: 'keyCount',
    doc: 'the 64-bit key word of each offload key per request per group: word 0 of its 256-bit identity, what tiers index by',
  },
  {
    name: 'keyChecks',
    writer: 'hasher',
    publishedBy: 'keyCount',
    doc: 'words 1-3 of each offload key (192 bits) beside its key word, written before the key count like the key word; every tier compares the whole identity before it serves a byte',
  },
  {
    name: 'blocks',
    writer: 'allocator',
    publishedBy: 'blockCount',
    doc: 'GPU block IDs per request per group; 0 is the null block',
  },
  {
    name: 'pins',
    writer: 'store (add) / transfer (sub)',
    publishedBy: '-',
    doc: 'pin count per GPU block; the allocator never reuses a pinned block',
  },
  {
    name: 'dirty',
    writer: 'scheduler, hasher, allocator (set: Atomics.or) / store (clear: Atomics.exchange)',
    publishedBy: '-',
    doc: 'one bit per slot, 32 slots a word: raised after every publication the store must react to, so an idle pass reads one word per 32 slots',
  },
] as const;

/**
 * Slots per word of the dirty bitmap. The bitmap is the one place several
 * roles write the same word, and only with read-modify-write operations:
 * a writer role raises its slot's bit with one Atomics.or after the data and
 * count it publishes, and the store takes a whole word with Atomics.exchange
 * before it snapshots the slots whose bits were set. A publication that lands
 * after the exchange raises the bit again, so nothing the store must see is
 * lost; one that lands before it is visible to the snapshot that follows.
 */
export const DIRTY_SLOTS_PER_WORD = 32;

/** Words of the dirty bitmap for `maxRequests` slots. */
export function dirtyWordCount(maxRequests: number): number {
  return Math.ceil(maxRequests / DIRTY_SLOTS_PER_WORD);
}

/**
 * Raises `slot`'s dirty bit: the last write of every role publication the
 * store must react to (open, progress, tokens, preempt, finish, abort,
 * release, hashes and keys, block appends and changes). One atomic operation.
 */
export function markDirty(dirty: Int32Array, slot: number): void {
  Atomics.or(dirty, slot >>> 5, 1 << (slot & 31));
}

function f(name: string, writer: Role, perGroup: boolean, index: number, doc: string): FieldSpec {
  return { name, writer, perGroup, index, doc };
}

/** Word offsets of each role's line within a slot, and the slot stride. */
export interface SlotGeometry {
  readonly schedulerLine: number;
  readonly hasherLine: number;
  readonly allocatorLine: number;
  readonly storeLine: number;
  readonly slotWords: number;
}

export function slotGeometry(groupCount: number, padded: boolean): SlotGeometry {
  const sched = S_HIT_CHUNKS + groupCount;
  const hash = H_KEY_COUNT + groupCount;
  const alloc = A_BLOCK_COUNT + groupCount;
  const store = T_CURSOR + groupCount;
  if (padded) {
    return {
      schedulerLine: 0,
      hasherLine: LINE_WORDS,
      allocatorLine: 2 * LINE_WORDS,
      storeLine: 3 * LINE_WORDS,
      slotWords: 4 * LINE_WORDS,
    };
  }
  return {
    schedulerLine: 0,
    hasherLine: sched,
    allocatorLine: sched + hash,
    storeLine: sched + hash + alloc,
    slotWords: sched + hash + alloc + store,
  };
}

/** The buffers that make up one shared state; pass these to any thread to attach. */
export interface SharedBuffers {
  readonly control: SharedArrayBuffer;
  readonly tokens: SharedArrayBuffer;
  readonly roots: SharedArrayBuffer;
  readonly hashes: SharedArrayBuffer;
  readonly keys: SharedArrayBuffer;
  readonly keyChecks: SharedArrayBuffer;
  readonly blocks: SharedArrayBuffer;
  readonly pins: SharedArrayBuffer;
  /** The dirty bitmap (see DIRTY_SLOTS_PER_WORD); in its own buffer, away from the slot lines. */
  readonly dirty: SharedArrayBuffer;
}

export function bufferSizes(config: Config): Record<keyof SharedBuffers, number> {
  const g = config.groups.length;
  const geom = slotGeometry(g, config.padHotWords);
  return {
    control: (config.maxRequests * geom.slotWords + LINE_WORDS) * 4,
    tokens: config.maxRequests * config.maxTokensPerRequest * 4,
    roots: config.maxRequests * DIGEST_BYTES,
    hashes: config.maxRequests * config.maxHashesPerRequest * DIGEST_BYTES,
    keys: config.maxRequests * g * config.maxChunksPerRequest * 8,
    keyChecks: config.maxRequests * g * config.maxChunksPerRequest * KEY_CHECK_WORDS * 8,
    blocks: config.maxRequests * g * config.maxBlocksPerRequest * 4,
    pins: config.gpuBlocks * 4,
    dirty: dirtyWordCount(config.maxRequests) * 4,
  };
}
