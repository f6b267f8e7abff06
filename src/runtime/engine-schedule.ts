// The engine simulator's scheduling: vLLM's scheduler, on the engine's own
// count of the pool (blocks held by live requests, including ending ones until
// the allocator released them, plus blocks asked for and not yet answered).
// The policy is schedule-policy.ts's (shared with the roles fuzz target's
// engine): running requests are served oldest first; one that needs more
// blocks than are free makes room by preempting the newest running request,
// never an older one, so the oldest always progresses and the pool cannot
// livelock. Preempted requests resume (oldest first) before anything new is
// admitted. A request that could not make one step even with the whole pool
// to itself is ended with a reason. The allocator can still refuse blocks the count says
// are free (they wait in quarantine for a copy to finish): that allocation is
// only sent again, and the step commits when all its allocations are in, so
// how fast the copies run changes when a step commits, not what it decides.
import { commit, end, randomAborts } from './engine-commit.js';
import { admit, giveUpHit, hitBlocks, requestHitBlocks } from './engine-loads.js';
import { blocksCleared, preemptedLife } from './engine-request.js';
import type { EngineRequest } from './engine-request.js';
import { ALLOC_FAILURES_MAX } from './engine-state.js';
import type { EngineState } from './engine-state.js';
import { OP_ALLOC, OP_PREEMPT } from './protocol.js';
import {
  admissionBlocks,
  byAdmissionOrder,
  byRunOrder,
  mayAdmit,
  mustEndTooBig,
  mustPreemptItself,
  nextInArrivalOrder,
  preemptionVictim,
  resumeRoom,
} from './schedule-policy.js';

/** Least time between two sends of a refused allocation. */
const ALLOC_RETRY_MS = 1;

/** One plan's running figures: the step's token budget left, and whether older work waits for room. */
interface StepPlan {
  budget: number;
  waiting: boolean;
  did: boolean;
}

/** Plans one engine step: running requests, then preempted ones, then tier hits, then admissions. */
export function plan(e: EngineState): boolean {
  const p: StepPlan = { budget: e.options.stepTokenBudget, waiting: false, did: false };
  planRunning(e, p);
  planPreempted(e, p);
  planHits(e, p);
  planAdmissions(e, p);
  return p.did;
}

function planRunning(e: EngineState, p: StepPlan): void {
  const running = e.live.filter((r) => r.phase === 'running');
  running.sort(byRunOrder);
  let older = 0; // requests earlier in this pass still running: they outrank r
  for (const r of running) {
    if (p.budget <= 0) break;
    if (r.phase !== 'running') continue; // preempted below to make room for an older one
    let n = tokensFor(e, r, p.budget);
    if (n <= 0) {
      older += 1;
      continue;
    }
    while (e.blocksFor(r, n) > e.freeBlocks()) {
      const victim = preemptionVictim(e.live, r);
      if (victim === undefined) break;
      preempt(e, victim);
      p.did = true;
    }
    if (mustPreemptItself(e.blocksFor(r, n) > e.freeBlocks(), older, r.held)) {
      // Nothing newer is left: like vLLM it preempts itself, so the older
      // requests keep the room to grow; it resumes once there is room again.
      preempt(e, r);
      p.did = true;
      break;
    }
    // The oldest (or one holding nothing) takes the prefill chunk that fits.
    n = e.fitTokens(r, n, e.freeBlocks());
    if (n === 0) {
      if (mustEndTooBig(n, e.heldBlocks === r.held && e.reservedBlocks === 0)) {
        end(e, r, 'aborted', poolReason(e, r));
        p.did = true;
      }
      // Else older requests or ending ones hold the rest: it waits for them.
      break; // nothing newer is left running
    }
    older += 1;
    p.budget -= n;
    requestBlocks(e, r, n);
    p.did = true;
  }
}

/**
 * Preempted requests resume before new ones start (they keep their slot),
 * oldest first, with a small reserve kept free while others run (so a
 * resumed request is not the next victim at once).
 */
function planPreempted(e: EngineState, p: StepPlan): void {
  const preempted = e.live.filter((r) => r.phase === 'preempted');
  preempted.sort(byAdmissionOrder);
  for (const r of preempted) {
    if (p.budget <= 0 || activeCount(e) >= e.options.maxRunning) {
      p.waiting = true;
      break;
    }
    const alone = e.heldBlocks === 0 && e.reservedBlocks === 0;
    const n = e.fitTokens(
      r,
      tokensFor(e, r, p.budget),
      resumeRoom(e.freeBlocks(), e.watermarkBlocks(), alone),
    );
    if (mustEndTooBig(n, alone)) {
      end(e, r, 'aborted', poolReason(e, r));
      p.did = true;
      continue;
    }
    if (n === 0) {
      p.waiting = true;
      break;
    }
    e.setRunning(r);
    p.budget -= n;
    requestBlocks(e, r, n);
    p.did = true;
  }
}

/** Tier hits waiting for room to load into, oldest first, ahead of new arrivals. */
function planHits(e: EngineState, p: StepPlan): void {
  const hits = e.live.filter((r) => r.phase === 'hit-alloc' && !r.awaiting);
  hits.sort(byAdmissionOrder);
  for (const r of hits) {
    if (hitBlocks(r) <= e.freeBlocks()) {
      requestHitBlocks(e, r);
      p.did = true;
    } else if (++r.allocFailures >= ALLOC_FAILURES_MAX) {
      giveUpHit(e, r);
      p.did = true;
    } else p.waiting = true;
  }
}

/**
 * Admissions, in arrival order, behind any preempted request: a slot, room
 * under maxRunning, and room for its first prefill chunk. A request whose
 * lookup was deferred waits out its back-off; the ones behind it go ahead.
 */
function planAdmissions(e: EngineState, p: StepPlan): void {
  let admitBlocks = 0;
  const now = e.now();
  while (
    !p.waiting &&
    e.queue.length > 0 &&
    p.budget > 0 &&
    activeCount(e) < e.options.maxRunning &&
    e.scheduler.freeSlotCount > lookupsInFlight(e)
  ) {
    const r = nextInArrivalOrder(e.queue, (q) => q.lookupRetryAtMs <= now);
    if (r === undefined) break;
    const first = Math.min(r.promptLength, p.budget);
    const alone = e.heldBlocks === 0 && e.reservedBlocks === 0 && admitBlocks === 0;
    const need = admissionBlocks(e.blocksForTokens(first), e.watermarkBlocks(), alone);
    // Alone it is admitted whatever its size: the running pass fits its
    // prefill chunks to the pool, or ends it if not even one token fits.
    if (!mayAdmit(need, e.freeBlocks() - admitBlocks, alone)) break;
    e.queue.splice(e.queue.indexOf(r), 1);
    // Its first prefill chunk is part of this step's budget (it runs once the lookup answers).
    p.budget -= first;
    admitBlocks += need;
    admit(e, r);
    p.did = true;
  }
}

function poolReason(e: EngineState, r: EngineRequest): string {
  const need = e.blocksFor(r, 1);
  return (
    `gpu-pool: needs ${r.held + need} GPU blocks to compute token ${r.computed + 1}; ` +
    `the pool has ${e.views.config.gpuBlocks - 1}`
  );
}

function activeCount(e: EngineState): number {
  let n = 0;
  for (const r of e.live) {
    if (
      r.phase === 'running' ||
      r.phase === 'lookup' ||
      r.phase === 'hit-alloc' ||
      r.phase === 'loading'
    )
      n += 1;
  }
  return n;
}

function lookupsInFlight(e: EngineState): number {
  let n = 0;
  for (const r of e.live) if (r.phase === 'lookup') n += 1;
  return n;
}

/** Tokens to schedule for `r` this step: a prefill chunk, or a decode token plus drafts. */
function tokensFor(e: EngineState, r: EngineRequest, budget: number): number {
  let n: number;
  if (r.computed < r.promptLength) n = Math.min(r.promptLength - r.computed, budget);
  else {
    const room = e.views.config.maxTokensPerRequest - r.computed - 1;
    n = Math.max(0, Math.min(1 + (e.eagle ? e.options.eagleDraftTokens : 0), room));
  }
  // The allocator answers a step's allocation with every block ID in one
  // ring record: a larger step (a big stepTokenBudget over small blocks)
  // made it throw and took the runtime down. Such a prefill takes more steps.
  return e.fitTokens(r, n, e.allocIdsMax);
}

function requestBlocks(e: EngineState, r: EngineRequest, n: number): void {
  const { config } = e.views;
  r.planned = n;
  for (const g of config.groups) {
    const need = Math.ceil((r.computed + n) / g.tokensPerBlock) - r.blocks[g.index]!.length;
    r.wanted[g.index] = Math.max(0, need);
  }
  e.reserve(r);
  r.granted = false;
  r.retry = false;
  e.stepRequests.push(r);
  sendStepAlloc(e, r);
}

function sendStepAlloc(e: EngineState, r: EngineRequest): void {
  const record = [OP_ALLOC, r.id, r.handle!.slot, r.handle!.generation];
  for (const g of e.views.config.groups) record.push(0, r.wanted[g.index]!);
  e.sendAlloc(r, record);
}

/** The allocator answered a running request's step allocation: its blocks, or a refusal to send again. */
export function onStepAllocAnswer(
  e: EngineState,
  r: EngineRequest,
  ok: boolean,
  ids: Int32Array,
): void {
  if (!ok) {
    e.counters.poolAllocationFailures += 1;
    r.allocFailures += 1;
    r.retry = true;
    return;
  }
  let at = 0;
  for (let g = 0; g < r.blocks.length; g += 1) {
    for (let i = 0; i < r.wanted[g]!; i += 1) r.blocks[g]!.push(ids[at++]!);
  }
  e.hold(r);
  r.allocFailures = 0;
  r.granted = true;
}

/** Preempts `r`: its blocks go back (recompute from zero later); its slot and cursor stay. */
function preempt(e: EngineState, r: EngineRequest): void {
  const h = r.handle!;
  e.scheduler.preempt(h);
  e.toAllocator.send([OP_PREEMPT, h.slot, h.generation]);
  e.heldBlocks -= r.held;
  r.held = 0;
  preemptedLife(r);
  // The allocator clears its blocks at once (OP_PREEMPT above).
  blocksCleared(r);
  e.counters.preemptions += 1;
}

/**
 * Every allocation of the step answered: commit the step in plan order, or
 * send the refused ones again (their blocks wait in quarantine).
 */
export function finishStep(e: EngineState, closing: boolean): boolean {
  const retry = e.stepRequests.filter((r) => r.phase === 'running' && r.retry);
  if (retry.length > 0) return retryStep(e, retry);
  const step = e.stepRequests;
  e.stepRequests = [];
  let committed = 0;
  for (const r of step) {
    if (r.phase !== 'running' || !r.granted) continue; // ended while the step waited
    r.granted = false;
    commit(e, r);
    committed += 1;
  }
  // Random aborts are drawn once per committed step, after it.
  if (committed > 0 && !closing) randomAborts(e);
  return true;
}

/** Sends the step's refused allocations again, or preempts one refused too often (a backstop). */
function retryStep(e: EngineState, retry: readonly EngineRequest[]): boolean {
  // Backs off (the worker parks) instead of spinning against the allocator
  // while the copies that hold the blocks finish.
  if (e.now() - e.lastRetryMs < Math.max(e.options.stepMs, ALLOC_RETRY_MS)) return false;
  e.lastRetryMs = e.now();
  for (const r of retry) {
    if (r.allocFailures >= ALLOC_FAILURES_MAX) {
      // Backstop: let the rest of the step commit; it resumes later.
      e.unreserve(r);
      preempt(e, r);
    } else {
      r.retry = false;
      sendStepAlloc(e, r);
    }
  }
  return true;
}
