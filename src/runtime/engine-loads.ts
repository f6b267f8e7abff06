// Admission and the load path of the engine simulator: the lookup a request
// sends at admission (and its back-off when the store says "not yet"), the
// hit it opens with, the blocks the hit loads into, the load record to the
// store, and the check of every loaded block against its chunk's key. A
// failed load is never served as a hit (F11): the request recomputes from the
// first chunk that failed, or fails (loadFailurePolicy, decided by the store).
import { invariant } from '../errors.js';
import { loadPlan, lookupWaitMs } from '../lookup.js';
import type { KvEntry } from './engine-kv.js';
import { end } from './engine-commit.js';
import { ensureKeys, unlockRecord } from './engine-request.js';
import type { EngineRequest } from './engine-request.js';
import { ALLOC_FAILURES_MAX } from './engine-state.js';
import type { EngineState } from './engine-state.js';
import { encodeLookup, lookupTokensThatFit } from './lookup-record.js';
import {
  ANS_LOADED,
  ANS_LOOKED_UP,
  LOOKUP_DEFERRED,
  LOOKUP_FAILED,
  LOOKUP_RETRY,
  OP_ALLOC,
  OP_LOAD,
} from './protocol.js';

/**
 * A deferred lookup is asked again after a back-off that starts at one engine
 * step (at least LOOKUP_RETRY_MS_MIN) and doubles up to LOOKUP_RETRY_MS_MAX:
 * a copy that lands at once costs one step, a long wait costs a few dozen
 * lookups instead of one per step (the store role answers every one).
 */
const LOOKUP_RETRY_MS_MIN = 1;
const LOOKUP_RETRY_MS_MAX = 64;

/** Admits `r` to the live set: it looks its prompt up in the tier, or opens with no hit. */
export function admit(e: EngineState, r: EngineRequest): void {
  r.admittedSeq = ++e.admitted;
  e.live.push(r);
  const { config } = e.views;
  const tpc = config.groups[0]!.tokensPerChunk;
  // A hit is counted in chunks common to every group: with groups of
  // different chunk sizes the runtime loads nothing (the store would answer 0).
  const sameChunks = config.groups.every((g) => g.tokensPerChunk === tpc);
  // Every key of the prompt (as many as a ring record holds): the lookup decides how much may be loaded.
  const numTokens = lookupTokensThatFit(config, r.promptLength, e.storeRecordWordsMax);
  if (!e.options.loadFromTier || numTokens < tpc || !sameChunks) {
    open(e, r, 0);
    return;
  }
  ensureKeys(r, numTokens);
  // A request deferred for too long takes what is readable now (the wait is bounded).
  const { lookupWaitBaseMs: base, lookupWaitPerThousandTokensMs: perK } = e.options;
  const force =
    r.deferredSinceMs >= 0 &&
    e.now() - r.deferredSinceMs > lookupWaitMs(r.promptLength, base, perK);
  r.phase = 'lookup';
  r.lookupSentMs = e.now();
  e.lookupsPending += 1;
  e.toStore.send(encodeLookup(config, r.id, numTokens, force, (g, c) => r.keys[g]![c]!, r.limits));
}

/** Opens `r`'s request slot with `hit` chunks from the tier; a hit waits for blocks to load into. */
function open(e: EngineState, r: EngineRequest, hit: number): void {
  const { config } = e.views;
  r.hit = hit;
  if (hit > 0) r.load = loadPlan(config.groups, 0, hit * config.groups[0]!.tokensPerChunk);
  r.handle = e.scheduler.open({
    requestId: r.id,
    promptTokens: r.tokens.subarray(0, r.numTokens),
    hitChunks: new Array<number>(config.groups.length).fill(hit),
    ...(e.options.offload ? {} : { maxOffloadTokens: 0 }),
    ...(r.cacheSalt !== undefined ? { cacheSalt: r.cacheSalt } : {}),
  });
  if (hit > 0) {
    r.phase = 'hit-alloc';
    // Else it waits for room in plan (like vLLM's waiting queue), bounded.
    if (hitBlocks(r) <= e.freeBlocks()) requestHitBlocks(e, r);
  } else {
    e.setRunning(r);
  }
}

/** Gives a tier hit up: recompute from zero (the cursor still starts after it; those chunks are in the tier). */
export function giveUpHit(e: EngineState, r: EngineRequest): void {
  e.toStore.send(unlockRecord(r));
  e.setRunning(r);
  r.allocFailures = 0;
}

/** Blocks the hit's load fills, over all groups (the load plan's, as the store loads it). */
export function hitBlocks(r: EngineRequest): number {
  let n = 0;
  for (const p of r.load) n += p.endBlock - p.firstBlock;
  return n;
}

/** Asks the allocator for the blocks the hit loads into. */
export function requestHitBlocks(e: EngineState, r: EngineRequest): void {
  const { config } = e.views;
  const bpc = config.blocksPerChunk;
  const record = [OP_ALLOC, r.id, r.handle!.slot, r.handle!.generation];
  for (const g of config.groups) {
    const lo = r.load[g.index]!.firstChunk;
    r.wanted[g.index] = (r.hit - lo) * bpc;
    record.push(lo * bpc, r.wanted[g.index]!);
  }
  e.reserve(r);
  e.sendAlloc(r, record);
}

/** The allocator answered a hit's blocks: load into them, or try again (bounded). */
export function onHitAllocAnswer(
  e: EngineState,
  r: EngineRequest,
  ok: boolean,
  ids: Int32Array,
): void {
  if (ok) {
    e.hold(r);
    startLoad(e, r, ids);
    return;
  }
  e.counters.poolAllocationFailures += 1;
  e.unreserve(r);
  r.allocFailures += 1;
  if (r.allocFailures < ALLOC_FAILURES_MAX) return; // retried next plan
  giveUpHit(e, r);
}

function startLoad(e: EngineState, r: EngineRequest, ids: Int32Array): void {
  const { config } = e.views;
  const bpc = config.blocksPerChunk;
  const record = [OP_LOAD, r.id, r.handle!.slot, r.handle!.generation];
  let at = 0;
  for (const g of config.groups) {
    const lo = r.load[g.index]!.firstChunk;
    const blocks = r.blocks[g.index]!;
    for (let p = 0; p < lo * bpc; p += 1) blocks.push(0);
    for (let p = lo * bpc; p < r.hit * bpc; p += 1) {
      blocks.push(ids[at]!);
      record.push(ids[at]!);
      at += 1;
    }
    r.nulledTo[g.index] = lo * bpc;
  }
  r.phase = 'loading';
  e.outstanding += 1;
  e.toStore.send(record);
}

/** A store answer: a lookup's or a load's. */
export function onStoreAnswer(e: EngineState, a: Int32Array): void {
  const r = e.byId.get(a[1]!);
  if (r === undefined) invariant(false, `store answer for a known request ${a[1]}`);
  if (a[0] === ANS_LOOKED_UP && a[2] === LOOKUP_FAILED) lookupFailed(e, r, a);
  else if (a[0] === ANS_LOOKED_UP) onLookupAnswer(e, r, a[2]!);
  else onLoadAnswer(e, r, a);
}

/** A lookup answered: its wait is measured and it is no longer pending. */
function lookupAnswered(e: EngineState, r: EngineRequest): void {
  invariant(r.phase === 'lookup' && e.lookupsPending > 0, 'lookup answer while looking up');
  e.lookupsPending -= 1;
  const waitMs = e.now() - r.lookupSentMs;
  r.lookupSentMs = -1;
  if (waitMs > e.counters.lookupWaitMsMax) e.counters.lookupWaitMsMax = waitMs;
}

/** [LOOKED_UP, id, LOOKUP_FAILED, firstFailedChunk, hitChunks]: a lower level refused a chunk and the policy is 'fail'. */
function lookupFailed(e: EngineState, r: EngineRequest, a: Int32Array): void {
  lookupAnswered(e, r);
  // It holds no slot: nothing releases it from the live list later.
  e.live.splice(e.live.indexOf(r), 1);
  failByLoad(e, r, a[3]!, a[4]!);
}

/** loadFailurePolicy 'fail': the request ends with LoadFailedError's code as its reason. */
function failByLoad(
  e: EngineState,
  r: EngineRequest,
  firstFailedChunk: number,
  hitChunks: number,
): void {
  r.loadFailed = { firstFailedChunk, hitChunks };
  end(e, r, 'aborted', `KVOFF_LOAD_FAILED: chunk ${firstFailedChunk} of ${hitChunks}`);
}

function onLookupAnswer(e: EngineState, r: EngineRequest, answer: number): void {
  lookupAnswered(e, r);
  if (answer !== LOOKUP_DEFERRED && answer !== LOOKUP_RETRY) {
    open(e, r, answer);
    return;
  }
  // Ask again at a later step (vLLM's "None" for HIT_PENDING and RETRY alike; the store
  // counts the two apart): back to the head of the queue, no slot taken,
  // after a back-off on the engine's clock (others behind it are admitted meanwhile).
  const now = e.now();
  if (r.deferredSinceMs < 0) r.deferredSinceMs = now;
  r.lookupBackoffMs =
    r.lookupBackoffMs === 0
      ? Math.max(e.options.stepMs, LOOKUP_RETRY_MS_MIN)
      : Math.min(2 * r.lookupBackoffMs, LOOKUP_RETRY_MS_MAX);
  r.lookupRetryAtMs = now + r.lookupBackoffMs;
  r.phase = 'queued';
  e.live.splice(e.live.indexOf(r), 1);
  e.queue.unshift(r);
}

function onLoadAnswer(e: EngineState, r: EngineRequest, a: Int32Array): void {
  invariant(a[0] === ANS_LOADED && r.phase === 'loading', 'load answer while loading');
  e.outstanding -= 1;
  if (a[4] === 1) {
    failByLoad(e, r, a[3]!, r.hit);
    return;
  }
  // A failed copy leaves its blocks holding whatever they held: never serve
  // them as a hit (F11). Only the sound prefix the store reports counts as
  // loaded ([LOADED, id, ok, loadedChunks, fails]); the rest is recomputed
  // into the same blocks.
  const loaded = a[2] === 1 ? r.hit : a[3]!;
  verifyLoad(e, r, loaded);
  const tpc = e.views.config.groups[0]!.tokensPerChunk;
  r.computed = loaded * tpc;
  r.bytesChunks.fill(loaded);
  e.counters.tierHits += loaded;
  e.setRunning(r);
}

/** Every block loaded below chunk `upTo` must hold the expansion of its chunk's key. */
function verifyLoad(e: EngineState, r: EngineRequest, upTo: number): void {
  const bpc = e.views.config.blocksPerChunk;
  const loaded: KvEntry[] = [];
  for (const g of e.views.config.groups) {
    const blocks = r.blocks[g.index]!;
    const lo = r.load[g.index]!.firstChunk;
    for (let p = lo * bpc; p < upTo * bpc; p += 1) {
      loaded.push({
        block: blocks[p]!,
        key: r.keys[g.index]![Math.floor(p / bpc)]!,
        position: p % bpc,
      });
    }
  }
  if (loaded.length > 0) e.counters.loadMismatches += e.kv.mismatches(loaded);
}
