// Every shared word the runtime adds beyond the request state (src/layout.ts):
// doorbells, ring heads and tails, and the counters behind `stats()`. Each is
// declared once here with its single writer. Hot words (a ring's head and tail,
// a doorbell) each sit on their own 64-byte line so producer and consumer never
// false-share.
import type { Role } from '../layout.js';
import { LINE_WORDS } from '../layout.js';

export type RuntimeRole = Role | 'main';

/** Doorbells: one Int32 word per consumer, bumped and notified by any producer (Atomics.add). */
export const DOORBELLS = ['scheduler', 'hasher', 'allocator', 'store'] as const;
export type DoorbellName = (typeof DOORBELLS)[number];

/** Word of each doorbell inside the doorbell buffer (one line each). */
export function doorbellWord(name: DoorbellName): number {
  return DOORBELLS.indexOf(name) * LINE_WORDS;
}
export const DOORBELL_BUFFER_BYTES = DOORBELLS.length * LINE_WORDS * 4;

/**
 * The single-producer single-consumer rings between roles. Control records
 * travel here, never bulk bytes (those live in the arenas).
 */
export const RINGS = {
  /** main -> scheduler: request submissions. */
  submit: { producer: 'main', consumer: 'scheduler', words: 1 << 16 },
  /** scheduler -> allocator: allocate, preempt, null, end. */
  allocRequest: { producer: 'scheduler', consumer: 'allocator', words: 1 << 16 },
  /** allocator -> scheduler: block IDs answered, request released. */
  allocAnswer: { producer: 'allocator', consumer: 'scheduler', words: 1 << 18 },
  /** scheduler -> store: tier prefix lookups and load jobs. */
  storeRequest: { producer: 'scheduler', consumer: 'store', words: 1 << 18 },
  /** store -> scheduler: lookup results and load completions. */
  storeAnswer: { producer: 'store', consumer: 'scheduler', words: 1 << 14 },
} as const satisfies Record<
  string,
  { producer: RuntimeRole; consumer: RuntimeRole; words: number }
>;
export type RingName = keyof typeof RINGS;

/**
 * Runtime counters: one BigInt64 word each, written only by the role named
 * here (it counts locally and publishes with Atomics.store). They are read
 * rarely (stats()) and written at most once per step, so they share lines.
 */
export const STATS = [
  // scheduler (engine simulator)
  { name: 'requests', writer: 'scheduler', doc: 'requests the engine received' },
  { name: 'completed', writer: 'scheduler', doc: 'requests that finished normally' },
  { name: 'aborted', writer: 'scheduler', doc: 'requests aborted (queued or running)' },
  { name: 'preemptions', writer: 'scheduler', doc: 'preemptions with recompute' },
  { name: 'poolAllocationFailures', writer: 'scheduler', doc: 'block requests the pool refused' },
  { name: 'engineSteps', writer: 'scheduler', doc: 'engine steps committed' },
  { name: 'tokensComputed', writer: 'scheduler', doc: 'tokens computed, recompute included' },
  { name: 'tierHits', writer: 'scheduler', doc: 'chunks loaded from the tier at admission' },
  {
    name: 'loadMismatches',
    writer: 'scheduler',
    doc: 'loaded blocks whose bytes did not match their key',
  },
  {
    name: 'recordsRefused',
    writer: 'scheduler',
    doc: 'malformed submit-ring records refused (nothing was started for them)',
  },
  {
    name: 'lookupWaitMsMax',
    writer: 'scheduler',
    doc: 'longest wait of an admission lookup for its answer (ms; the engine keeps stepping meanwhile)',
  },
  {
    name: 'stepsPlannedDuringLookups',
    writer: 'scheduler',
    doc: 'engine steps planned while at least one admission lookup was unanswered',
  },
  // store
  { name: 'chunksStored', writer: 'store', doc: 'chunks dispatched to the transfer backend' },
  { name: 'resets', writer: 'store', doc: 'resets (vLLM reset_cache) the store ran' },
  {
    name: 'chunksDiscardedByReset',
    writer: 'store',
    doc: 'chunks of store jobs in flight at a reset: copied, never published',
  },
  {
    name: 'chunksSkippedUnready',
    writer: 'store',
    doc: 'token-ready chunks the cursor passed unstored (a legacy policy; 0 under ready-prefix)',
  },
  {
    name: 'chunksDeferred',
    writer: 'store',
    doc: 'chunk-visits where a token-ready chunk was not ready (a pass visits a slot after a publication)',
  },
  {
    name: 'chunksDeferredThenStored',
    writer: 'store',
    doc: 'stored chunks that had been deferred before',
  },
  {
    name: 'allocationRetries',
    writer: 'store',
    doc: 'store offers the tier could not allocate (retried next pass)',
  },
  {
    name: 'chunksDroppedForCapacity',
    writer: 'store',
    doc: 'final chunks the tier could not take after retries',
  },
  {
    name: 'chunksUnreachable',
    writer: 'store',
    doc: 'sliding-window chunks passed without a copy: no hit aligned to the full-attention chunk can use them',
  },
  {
    name: 'chunksDroppedUnready',
    writer: 'store',
    doc: "token-ready chunks of an ended request whose keys or block IDs never came (settled without them, or the final wait's bound passed)",
  },
  { name: 'snapshotRetries', writer: 'store', doc: 'seqlock snapshots retried' },
  { name: 'bytesCopied', writer: 'store', doc: 'bytes copied by completed store jobs' },
  { name: 'jobsInFlight', writer: 'store', doc: 'store and load jobs submitted and not completed' },
  { name: 'jobsCompleted', writer: 'store', doc: 'store jobs completed' },
  {
    name: 'jobsTransferFailed',
    writer: 'store',
    doc: 'store jobs whose copy failed (their chunks dropped and counted; the runtime goes on)',
  },
  {
    name: 'chunksTransferFailed',
    writer: 'store',
    doc: 'chunks of store jobs whose copy failed: not stored, counted, never silent',
  },
  {
    name: 'rankAckTimeouts',
    writer: 'store',
    doc: 'store jobs failed as a whole because a rank did not acknowledge its copy within rankAckWaitMsMax',
  },
  {
    name: 'rankAcksLate',
    writer: 'store',
    doc: 'rank acknowledgements that arrived after their job was failed by rankAckWaitMsMax',
  },
  {
    name: 'jobsHeld',
    writer: 'store',
    doc: 'store jobs the planner holds (dispatched, not completed): equals the store part of jobsInFlight, 0 at rest; more would be a leak',
  },
  { name: 'tierUsed', writer: 'store', doc: 'tier entries (readable or being written)' },
  {
    name: 'holes',
    writer: 'store',
    doc: 'token-ready chunks of an ended request neither stored nor counted as dropped',
  },
  {
    name: 'doubleStores',
    writer: 'store',
    doc: 'chunks dispatched twice in one request generation',
  },
  { name: 'storePasses', writer: 'store', doc: 'planner passes' },
  {
    name: 'lookupsDeferred',
    writer: 'store',
    doc: 'lookups answered "ask again later" (an entry they need was being written or read)',
  },
  {
    name: 'lookupsRetried',
    writer: 'store',
    doc: 'lookups answered "retry" (a tier level below the host had not answered for a key they need)',
  },
  {
    name: 'loadFailures',
    writer: 'store',
    doc: 'loads with a chunk that could not be loaded (a failed copy, or a lower level refused it)',
  },
  {
    name: 'loadFailureTokensRecomputed',
    writer: 'store',
    doc: 'tokens of failed loads from the first failed chunk on, recomputed (loadFailurePolicy recompute)',
  },
  {
    name: 'requestsFailedByLoad',
    writer: 'store',
    doc: 'requests failed by a load failure (loadFailurePolicy fail)',
  },
  { name: 'eventsQueued', writer: 'store', doc: 'KV events put on the queue to main' },
  {
    name: 'storesBelowThreshold',
    writer: 'store',
    doc: "chunk stores the host tier's store threshold kept out (vLLM's stores_skipped)",
  },
  {
    name: 'lookupCalls',
    writer: 'store',
    doc: 'lookup calls the store answered (deferrals included)',
  },
  {
    name: 'lookupCallUs',
    writer: 'store',
    doc: 'time the store spent answering lookup calls (us)',
  },
  {
    name: 'lookupsResolvedAfterDefer',
    writer: 'store',
    doc: 'deferred lookups later answered with a hit or a miss',
  },
  {
    name: 'lookupDeferredUs',
    writer: 'store',
    doc: 'time from the first deferral of those lookups to their answer (us)',
  },
  {
    name: 'eventsDropped',
    writer: 'store',
    doc: 'KV events the full queue to main refused (never published)',
  },
  // allocator
  { name: 'blocksInUse', writer: 'allocator', doc: 'GPU blocks allocated' },
  {
    name: 'blocksQuarantined',
    writer: 'allocator',
    doc: 'freed blocks waiting for their pins to drop',
  },
  {
    name: 'publishLagMsMax',
    writer: 'allocator',
    doc: 'largest delay between answering and publishing a block ID',
  },
  // hasher
  { name: 'hashesPublished', writer: 'hasher', doc: 'block hashes published' },
  // main
  {
    name: 'verifyMismatches',
    writer: 'main',
    doc: 'tier blocks whose bytes did not match their key at verify',
  },
] as const satisfies readonly { name: string; writer: RuntimeRole; doc: string }[];

export type StatName = (typeof STATS)[number]['name'];
export const STAT_INDEX: Readonly<Record<StatName, number>> = Object.fromEntries(
  STATS.map((s, i) => [s.name, i]),
) as Record<StatName, number>;
export const STATS_BUFFER_BYTES = STATS.length * 8;

/** Bounded parks: an idle worker sleeps at most this long before re-checking its stop flag. */
export const PARK_MS_MAX = 20;
/** Control words, all written only by main. */
/** 1 once the run is closing: the scheduler aborts live requests and admits no more. */
export const CONTROL_CLOSING = 0;
/** 1 tells that role's worker to leave its loop (the store drains in-flight jobs first). */
export const CONTROL_STOP: Readonly<Record<DoorbellName, number>> = {
  scheduler: 1,
  hasher: 2,
  allocator: 3,
  store: 4,
};
export const CONTROL_BUFFER_BYTES = 4 * LINE_WORDS;
