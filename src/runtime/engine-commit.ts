// The engine simulator's commit and end: a step's tokens become computed
// (their chunks' bytes written as the expansion of each chunk's key before
// the published horizon covers them, drafts accepted, tokens sampled),
// sliding-window blocks leave, and a request ends (finished or aborted),
// its blocks released by the allocator and its summary sent.
import { invariant } from '../errors.js';
import { S_HIT_CHUNKS, T_CURSOR, T_GENERATION } from '../layout.js';
import type { RequestHandle } from '../roles/handle.js';
import type { KvEntry } from './engine-kv.js';
import { ensureKeys, unlockRecord } from './engine-request.js';
import type { EngineRequest } from './engine-request.js';
import type { EngineState } from './engine-state.js';
import { OP_END, OP_NULL, UNSET } from './protocol.js';

/** The step's tokens are computed: write bytes, publish progress, sample, slide windows, end. */
export function commit(e: EngineState, r: EngineRequest): void {
  const n = r.planned;
  const h = r.handle!;
  const before = r.computed;
  // Publish the horizon of this step (computed + scheduled), bytes first.
  writeBytesUpTo(e, r, Math.min(before + n, r.numTokens));
  e.scheduler.progress(h, before, n);
  r.publishedHorizon = before + n;
  // The forward pass ran: known tokens in range are computed; drafts may be accepted.
  const known = Math.min(n, r.numTokens - before);
  let computed = before + known;
  const sampled = computed >= r.numTokens ? sample(e, r, before, n) : [];
  computed += Math.max(0, sampled.length - 1);
  r.decoded += sampled.length;
  e.counters.tokensComputed += computed - before;
  r.computed = computed;
  if (sampled.length > 0) {
    const room = e.views.config.maxTokensPerRequest - r.numTokens;
    const take = sampled.slice(0, room);
    r.tokens.set(take, r.numTokens);
    r.numTokens += take.length; // local only: the shared count is published below
    // Drafts cut off by the request's capacity are not known tokens, so not computed ones.
    r.computed = Math.min(r.computed, r.numTokens);
    // The published horizon may already cover these tokens: their chunks' bytes go first.
    writeBytesUpTo(e, r, Math.min(r.publishedHorizon, r.numTokens));
    e.scheduler.appendTokens(h, take);
  }
  slideWindows(e, r);
  e.counters.engineSteps += 1;
  if (r.abortAfter !== UNSET && r.computed >= r.abortAfter) end(e, r, 'aborted');
  else if (r.decoded >= r.maxDecode || r.numTokens >= e.views.config.maxTokensPerRequest)
    end(e, r, 'finished');
}

/** The tokens a decode step samples: one, plus the EAGLE drafts accepted (up to the first rejection). */
function sample(e: EngineState, r: EngineRequest, before: number, n: number): number[] {
  let accepted = 0;
  // Accepted drafts never take the request past its decode limit.
  const left = r.maxDecode - r.decoded - 1;
  if (e.eagle && before >= r.promptLength) {
    while (accepted < Math.min(n - 1, left) && e.random.chance(e.options.eagleAcceptRate))
      accepted += 1;
  }
  const sampled: number[] = [];
  for (let i = 0; i < accepted + 1; i += 1) sampled.push(e.random.int(e.options.vocab));
  return sampled;
}

/** Writes the bytes of every chunk whose tokens end at or below `tokenLimit` (once per allocation). */
function writeBytesUpTo(e: EngineState, r: EngineRequest, tokenLimit: number): void {
  const { config } = e.views;
  const bpc = config.blocksPerChunk;
  const computed: KvEntry[] = [];
  ensureKeys(r, tokenLimit);
  for (const g of config.groups) {
    const blocks = r.blocks[g.index]!;
    const upTo = Math.min(
      Math.floor(tokenLimit / g.tokensPerChunk),
      Math.floor(blocks.length / bpc),
      r.keys[g.index]!.length,
    );
    for (let c = r.bytesChunks[g.index]!; c < upTo; c += 1) {
      const key = r.keys[g.index]![c]!;
      for (let p = c * bpc; p < (c + 1) * bpc; p += 1) {
        const b = blocks[p]!;
        if (b !== 0) computed.push({ block: b, key, position: p % bpc });
      }
    }
    if (upTo > r.bytesChunks[g.index]!) r.bytesChunks[g.index] = upTo;
  }
  if (computed.length > 0) e.kv.write(computed);
}

/** Windowed groups: blocks that left the window are nulled and freed by the allocator. */
function slideWindows(e: EngineState, r: EngineRequest): void {
  const { config } = e.views;
  const h = r.handle!;
  for (const g of config.groups) {
    if (g.windowChunks === null || g.kind !== 'sliding-window') continue;
    const windowTokens = g.windowChunks * g.tokensPerChunk;
    const to = Math.min(
      Math.max(0, Math.floor((r.computed - windowTokens) / g.tokensPerBlock)),
      r.blocks[g.index]!.length,
      // The fence: a block the store has not passed yet stays until it has
      // (vLLM offers a chunk in the step that computes it and fences its
      // blocks; here the store runs beside the engine, so the engine waits).
      storeCursor(e, h, g.index) * config.blocksPerChunk,
    );
    const from = r.nulledTo[g.index]!;
    if (to <= from) continue;
    for (let p = from; p < to; p += 1) {
      if (r.blocks[g.index]![p] !== 0) {
        r.held -= 1;
        e.heldBlocks -= 1;
      }
      r.blocks[g.index]![p] = 0;
    }
    r.nulledTo[g.index] = to;
    e.toAllocator.send([OP_NULL, h.slot, h.generation, g.index, from, to]);
  }
}

/** The store's cursor of a group of this request; the hit until the store adopted the generation. */
function storeCursor(e: EngineState, h: RequestHandle, group: number): number {
  const { state } = e.views;
  if (Atomics.load(state.control, state.storeWord(h.slot, T_GENERATION)) !== h.generation) {
    return Atomics.load(state.control, state.schedulerWord(h.slot, S_HIT_CHUNKS + group));
  }
  return Atomics.load(state.control, state.storeWord(h.slot, T_CURSOR + group));
}

/** Ends `r`: finished (its tokens but the last sampled one offloadable) or aborted; the allocator releases its blocks. */
export function end(
  e: EngineState,
  r: EngineRequest,
  status: 'finished' | 'aborted',
  reason?: string,
): void {
  if (r.phase === 'ending' || r.phase === 'done') return;
  r.ending = status;
  r.reason = reason;
  if (!r.awaiting) e.unreserve(r);
  const i = e.queue.indexOf(r);
  if (i >= 0) e.queue.splice(i, 1);
  if (r.handle === undefined) {
    // Told to ask again and now gone: the store stops reading the lower tiers for it.
    if (r.deferredSinceMs >= 0) e.toStore.send(unlockRecord(r));
    finishSummary(e, r, false);
    return;
  }
  const h = r.handle;
  if (status === 'finished') {
    // Finished: every token but the last sampled one becomes offloadable; bytes first.
    writeBytesUpTo(e, r, Math.max(r.promptLength, r.numTokens - 1));
    e.scheduler.finish(h);
  } else {
    e.scheduler.abort(h);
  }
  if (r.phase === 'hit-alloc' && !r.awaiting) e.toStore.send(unlockRecord(r));
  r.phase = 'ending';
  e.toAllocator.send([OP_END, r.id, h.slot, h.generation]);
}

/** The allocator released an ended request's blocks: its slot is free and its summary goes out. */
export function released(e: EngineState, r: EngineRequest): void {
  invariant(r.phase === 'ending', 'released after ending');
  e.heldBlocks -= r.held;
  r.held = 0;
  e.scheduler.release(r.handle!);
  e.live.splice(e.live.indexOf(r), 1);
  finishSummary(e, r, true);
}

/** The request is done: counted, and its summary sent (`opened`: it ever held a slot). */
export function finishSummary(e: EngineState, r: EngineRequest, opened: boolean): void {
  r.phase = 'done';
  e.byId.delete(r.id);
  if (r.ending === 'finished') e.counters.completed += 1;
  else e.counters.aborted += 1;
  // Counters first: whoever learns of the end from the event reads them up to date.
  e.publishStats();
  e.events.ended({
    requestId: r.id,
    status: r.ending,
    opened,
    promptTokens: r.promptLength,
    decodedTokens: r.decoded,
    hitChunks: r.hit,
    preemptions: r.preemptions,
    ...(r.reason === undefined ? {} : { reason: r.reason }),
    ...(r.loadFailed === undefined ? {} : { loadFailed: r.loadFailed }),
  });
}

/** The random aborts drawn after a committed step: one queued request, one running one. */
export function randomAborts(e: EngineState): boolean {
  let did = false;
  if (e.queue.length > 0 && e.random.chance(e.options.abortQueuedRate)) {
    end(e, e.queue[e.random.int(e.queue.length)]!, 'aborted');
    did = true;
  }
  if (e.random.chance(e.options.abortRunningRate)) {
    const running = e.live.filter(
      (r) => (r.phase === 'running' || r.phase === 'preempted') && !r.awaiting,
    );
    if (running.length > 0) {
      const r = running[e.random.int(running.length)]!;
      end(e, r, 'aborted');
      did = true;
    }
  }
  return did;
}

/** Aborts everything (the runtime is closing); true while anything changed. */
export function abortAll(e: EngineState): boolean {
  let did = false;
  for (const r of [...e.queue]) {
    end(e, r, 'aborted');
    did = true;
  }
  for (const r of [...e.live]) {
    if (r.phase === 'ending' || r.phase === 'done' || r.phase === 'lookup' || r.phase === 'loading')
      continue;
    if (r.awaiting) continue; // its answer arrives first
    end(e, r, 'aborted');
    did = true;
  }
  return did;
}
