// The load path for a host engine in external mode: the host asks the store
// role (which owns the tier) for a prompt's hit and has it load the hit into
// the request's blocks, over the same ring records the built-in engine uses,
// so both get the same decision (src/lookup.ts). The host is the only
// producer of the storeRequest ring and the only consumer of the storeAnswer
// ring in external mode; main never waits on shared memory, it polls on a
// timer, and every wait is bounded.
import type { Config } from '../config.js';
import { gpuBlockMatches } from '../copy.js';
import {
  ClosedError,
  InvalidArgumentError,
  LoadFailedError,
  TimeoutError,
  invariant,
} from '../errors.js';
import type { Hashing } from '../hashing.js';
import { loadHashing, promptKeys } from '../hashing.js';
import { validateCacheSalt } from '../identity.js';
import { A_BLOCK_COUNT, OWNER_CLOSED } from '../layout.js';
import { loadPlan, loadedPrefixChunks } from '../lookup.js';
import type { LoadFailurePolicy } from '../lookup.js';
import { checkHandle, ownHandle } from '../roles/handle.js';
import { IntInput } from '../roles/input.js';
import type { RequestHandle } from '../roles/handle.js';
import { RuntimeViews } from './buffers.js';
import type { RuntimeBuffers } from './buffers.js';
import { encodeLookup, lookupTokensThatFit, validateLookupLimits } from './lookup-record.js';
import type { LookupLimits } from './lookup-record.js';
import { checkLoadableGroups } from './request-rules.js';
import { Outbox } from './outbox.js';
import {
  ANS_LOADED,
  ANS_LOOKED_UP,
  LOOKUP_DEFERRED,
  LOOKUP_FAILED,
  LOOKUP_RETRY,
  OP_LOAD,
  OP_UNLOCK,
} from './protocol.js';
import type { SpscRing } from './rings.js';

/**
 * The store role's answer to a host's lookup. Deferred (ask again later) for
 * a `reason`: 'pending' (an entry it needs is being written or read) or
 * 'retry' (a tier level below the host has not answered yet: nothing known).
 */
export type ExternalLookupAnswer =
  | { readonly deferred: true; readonly reason: 'pending' | 'retry' }
  | {
      readonly deferred: false;
      /** Names the hit's protection in the store role until load() or cancel(). */
      readonly tag: number;
      readonly hitTokens: number;
      /** Per group, where the store cursor starts: pass as `hitChunks` to scheduler.open(). */
      readonly hitChunks: readonly number[];
      /** Per group, the prompt's offload keys. */
      readonly keys: readonly (readonly bigint[])[];
    };

export interface ExternalLookupOptions extends LookupLimits {
  /** The request was deferred for too long: pending entries count as what they are now. */
  readonly force?: boolean;
  /** The request's cache salt (open it with the same): only entries of the same salt hit. */
  readonly cacheSalt?: string;
  readonly timeoutMs?: number;
}

export interface ExternalLoadResult {
  /** The copy succeeded (false: it failed part-way; see loadedTokens). */
  readonly ok: boolean;
  readonly blocksLoaded: number;
  /** Loaded blocks whose bytes are not the expansion of their chunk's key (0 when the load is sound). */
  readonly mismatches: number;
  /**
   * Tokens of the hit that count as loaded (vLLM's num_computed_tokens after
   * a load): the whole hit when the load is sound; under loadFailurePolicy
   * 'recompute', the chunks before the first whose copy failed or whose
   * blocks did not verify. Compute the prompt from here.
   */
  readonly loadedTokens: number;
}

const POLL_MS = 1;
const ANSWERS_PER_PUMP_MAX = 256;
/** Tags are positive int32s; they wrap long before an outstanding one could be reused. */
const TAG_MAX = 0x7fffffff;
/**
 * Prompts answered "ask again later" whose tag is kept for the next lookup
 * of the same prompt, at most, and for how long (the store forgets a
 * resolution nobody asked about for 60 s).
 */
const DEFERRED_PROMPTS_MAX = 4096;
const DEFERRED_PROMPT_MS_MAX = 60_000;

export class ExternalLoadPath {
  private readonly config: Config;
  private readonly views: RuntimeViews;
  private readonly toStore: Outbox;
  private readonly storeRecordWordsMax: number;
  private readonly answers: SpscRing;
  private readonly waiting = new Map<number, (record: Int32Array) => void>();
  /** Hits looked up and neither loaded nor cancelled: tag -> answer. */
  private readonly open = new Map<number, ExternalLookupAnswer & { deferred: false }>();
  /**
   * Prompts last answered "ask again later", by what identifies their lookup
   * (see promptIdentity): the tag it went with. The next lookup of the same
   * prompt reuses it, so the store's resolution over the levels below host,
   * which it keeps by tag, belongs to the request and not to one call (with
   * a new tag each call, every call started a new resolution and was
   * answered 'retry' again, for as long as the host kept asking).
   */
  private readonly deferred = new Map<string, { tag: number; atMs: number }>();
  private readonly deferredTags = new Set<number>();
  private readonly ring: () => void;
  private readonly loadFailurePolicy: LoadFailurePolicy;
  private hashing: Hashing | undefined;
  private nextTag = 1;

  constructor(
    config: Config,
    buffers: RuntimeBuffers,
    ring: () => void,
    loadFailurePolicy: LoadFailurePolicy = 'recompute',
  ) {
    this.loadFailurePolicy = loadFailurePolicy;
    this.config = config;
    this.views = new RuntimeViews(config, buffers);
    const storeRequests = this.views.ring('storeRequest');
    this.storeRecordWordsMax = storeRequests.recordWordsMax;
    this.toStore = new Outbox(storeRequests);
    this.answers = this.views.ring('storeAnswer');
    this.ring = ring;
  }

  async lookup(
    promptTokensIn: ArrayLike<number>,
    options: ExternalLookupOptions = {},
  ): Promise<ExternalLookupAnswer> {
    this.expectOpen();
    // Read once and checked: the tokens hashed are the tokens checked.
    const promptTokens = IntInput.promptTokens(promptTokensIn);
    if (typeof options !== 'object' || options === null) {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    const limits = validateLookupLimits(options.maxLoadTokens, options.skipReadingPrefixCache);
    const salt = validateCacheSalt(options.cacheSalt);
    checkLoadableGroups(this.config);
    this.hashing ??= await loadHashing(this.config.keyHash);
    const keys = promptKeys(this.config, this.hashing, promptTokens, salt);
    const numTokens = lookupTokensThatFit(
      this.config,
      promptTokens.length,
      this.storeRecordWordsMax,
    );
    const force = options.force === true;
    const identity = promptIdentity(keys, numTokens, force, limits);
    const tag = this.tagFor(identity);
    const record = encodeLookup(this.config, tag, numTokens, force, (g, c) => keys[g]![c]!, limits);
    const answer = await this.ask(tag, record, ANS_LOOKED_UP, options.timeoutMs);
    const hit = answer[2]!;
    if (hit === LOOKUP_DEFERRED || hit === LOOKUP_RETRY) {
      this.rememberDeferred(identity, tag);
      return { deferred: true, reason: hit === LOOKUP_RETRY ? 'retry' : 'pending' };
    }
    this.forgetDeferred(identity, tag);
    if (hit === LOOKUP_FAILED) {
      // loadFailurePolicy 'fail': a level below host refused a chunk of the hit; nothing is locked.
      throw new LoadFailedError(answer[3]!, answer[4]!, 'a tier below host refused it');
    }
    const tpc = this.config.groups[0]!.tokensPerChunk;
    const out = {
      deferred: false as const,
      tag,
      hitTokens: hit * tpc,
      hitChunks: this.config.groups.map(() => hit),
      keys,
    };
    if (hit > 0) this.open.set(tag, out);
    return out;
  }

  /**
   * Loads a hit into the request's blocks: the host appended them first (null
   * below a windowed group's window, as the load plan says). Resolves once the
   * copy is done, with every loaded block checked against its chunk's key.
   */
  async load(
    handle: RequestHandle,
    answer: ExternalLookupAnswer,
    timeoutMs?: number,
  ): Promise<ExternalLoadResult> {
    const { state } = this.views;
    this.expectOpen();
    handle = ownHandle(handle);
    checkHandle(state, handle);
    if (
      typeof answer !== 'object' ||
      answer === null ||
      answer.deferred ||
      !this.open.has(answer.tag)
    ) {
      throw new InvalidArgumentError(
        'answer',
        'must be a hit looked up and not yet loaded or cancelled',
      );
    }
    const plans = loadPlan(this.config.groups, 0, answer.hitTokens);
    const bpc = this.config.blocksPerChunk;
    const { record, checks } = this.loadRecord(handle, answer, plans);
    this.open.delete(answer.tag);
    const done = await this.ask(answer.tag, record, ANS_LOADED, timeoutMs);
    const hitChunks = answer.hitTokens / this.config.groups[0]!.tokensPerChunk;
    if (done[4] === 1) throw new LoadFailedError(done[3]!, hitChunks, 'its copy failed');
    // Blocks are checked up to what the store says was copied soundly; the
    // first that does not verify ends the loaded prefix in its group.
    const copied = done[2] === 1 ? hitChunks : done[3]!;
    const { gpu, geometry } = this.views;
    const failedAt = plans.map((p) => p.endChunk);
    let mismatches = 0;
    for (const c of checks) {
      const chunk = Math.floor(c.position / bpc);
      if (chunk >= copied || gpuBlockMatches(gpu, geometry, c.block, c.key, c.position)) continue;
      mismatches += 1;
      failedAt[c.group] = Math.min(failedAt[c.group]!, chunk);
    }
    const loaded = Math.min(copied, loadedPrefixChunks(this.config.groups, plans, failedAt));
    if (loaded < hitChunks && this.loadFailurePolicy === 'fail') {
      throw new LoadFailedError(loaded, hitChunks, `${mismatches} blocks did not verify`);
    }
    return {
      ok: done[2] === 1,
      blocksLoaded: checks.length,
      mismatches,
      loadedTokens: loaded * this.config.groups[0]!.tokensPerChunk,
    };
  }

  /**
   * The LOAD record of a hit (its blocks, 0 for a window's leading nulls) and
   * each loaded block with the key it must hold; refuses blocks not appended
   * or null.
   */
  private loadRecord(
    handle: RequestHandle,
    answer: Extract<ExternalLookupAnswer, { deferred: false }>,
    plans: ReturnType<typeof loadPlan>,
  ): {
    record: number[];
    checks: { block: number; key: bigint; position: number; group: number }[];
  } {
    const { state } = this.views;
    const bpc = this.config.blocksPerChunk;
    const record = [OP_LOAD, answer.tag, handle.slot, handle.generation];
    const checks: { block: number; key: bigint; position: number; group: number }[] = [];
    for (const p of plans) {
      const count = Atomics.load(
        state.control,
        state.allocatorWord(handle.slot, A_BLOCK_COUNT + p.group),
      );
      if (count < p.endBlock) {
        throw new InvalidArgumentError(
          'handle',
          `group ${p.group} needs ${p.endBlock} blocks appended before the load (has ${count})`,
        );
      }
      const base = state.blockBase(handle.slot, p.group);
      // A window's leading null blocks are left out, as in LocalOffload.load
      // (vLLM loads from the first non-null block): they go as 0, which the
      // store does not copy into, and are not checked.
      let leadingNulls = this.config.groups[p.group]!.windowChunks !== null;
      for (let q = p.firstChunk * bpc; q < p.endChunk * bpc; q += 1) {
        const block = state.blocks[base + q]!;
        if (block === 0 && leadingNulls) {
          record.push(0);
          continue;
        }
        leadingNulls = false;
        if (block === 0) {
          throw new InvalidArgumentError(
            'handle',
            `group ${p.group} block ${q} is null but loaded`,
          );
        }
        record.push(block);
        checks.push({
          block,
          key: answer.keys[p.group]![Math.floor(q / bpc)]!,
          position: q,
          group: p.group,
        });
      }
    }
    return { record, checks };
  }

  /** Gives up a looked-up hit without loading it: the store role releases its protection. */
  cancel(answer: ExternalLookupAnswer): void {
    if (typeof answer !== 'object' || answer === null) {
      throw new InvalidArgumentError('answer', 'must be a lookup answer');
    }
    if (answer.deferred || !this.open.delete(answer.tag)) return;
    this.toStore.send([OP_UNLOCK, answer.tag, -1, 0]);
    this.pump();
  }

  /** True once the runtime's close() closed the shared memory (its owner words read closed). */
  closed(): boolean {
    const { state } = this.views;
    return Atomics.load(state.control, state.ownerWord('allocator')) === OWNER_CLOSED;
  }

  private expectOpen(): void {
    if (this.closed()) throw new ClosedError('the external host');
  }

  private takeTag(): number {
    for (let i = 0; i < TAG_MAX; i += 1) {
      const tag = this.nextTag;
      this.nextTag = tag >= TAG_MAX ? 1 : tag + 1;
      if (!this.waiting.has(tag) && !this.open.has(tag) && !this.deferredTags.has(tag)) return tag;
    }
    invariant(false, 'a free lookup tag');
  }

  /** The tag a prompt asked again with last (unless a call on it is in flight), else a new one. */
  private tagFor(identity: string): number {
    const kept = this.deferred.get(identity);
    if (kept !== undefined && !this.waiting.has(kept.tag)) return kept.tag;
    return this.takeTag();
  }

  private rememberDeferred(identity: string, tag: number): void {
    const now = Date.now();
    this.deferred.delete(identity);
    this.deferred.set(identity, { tag, atMs: now });
    this.deferredTags.add(tag);
    // Oldest first (insertion order): a host that gave up on a prompt never asks again.
    for (const [id, d] of this.deferred) {
      if (this.deferred.size <= DEFERRED_PROMPTS_MAX && now - d.atMs <= DEFERRED_PROMPT_MS_MAX) {
        break;
      }
      this.forgetDeferred(id, d.tag);
    }
  }

  private forgetDeferred(identity: string, tag: number): void {
    if (this.deferred.get(identity)?.tag !== tag) return;
    this.deferred.delete(identity);
    this.deferredTags.delete(tag);
  }

  private ask(
    tag: number,
    record: number[],
    answerOp: number,
    timeoutMs = 10_000,
  ): Promise<Int32Array> {
    return new Promise<Int32Array>((resolve, reject) => {
      const deadline = Date.now() + timeoutMs;
      this.waiting.set(tag, (a) => {
        if (a[0] !== answerOp) invariant(false, `answer ${a[0]} to tag ${tag} is ${answerOp}`);
        resolve(a);
      });
      this.toStore.send(record);
      const check = () => {
        this.pump();
        if (!this.waiting.has(tag)) return;
        // The store is gone: no answer will come, so do not wait out the bound.
        if (this.closed()) {
          this.waiting.delete(tag);
          reject(new ClosedError('the external host'));
          return;
        }
        if (Date.now() > deadline) {
          this.waiting.delete(tag);
          reject(new TimeoutError(answerOp === ANS_LOOKED_UP ? 'lookup' : 'load', timeoutMs));
          return;
        }
        setTimeout(check, POLL_MS);
      };
      check();
    });
  }

  /** Sends what waits and takes every answer there is. */
  private pump(): void {
    this.toStore.flush();
    this.ring();
    this.answers.drain((a) => {
      const tag = a[1]!;
      const resolve = this.waiting.get(tag);
      if (resolve !== undefined) {
        this.waiting.delete(tag);
        resolve(Int32Array.from(a));
      } else if (a[0] === ANS_LOOKED_UP && a[2]! > 0) {
        // A lookup that timed out was answered with a hit after all: release it.
        this.toStore.send([OP_UNLOCK, tag, -1, 0]);
      }
    }, ANSWERS_PER_PUMP_MAX);
  }
}

/**
 * What makes two lookups the same question: the prompt's keys (a chain over
 * its tokens and cache salt, so the last key of each group names the whole
 * prefix), its token count, and the lookup's flags and cap.
 */
function promptIdentity(
  keys: readonly (readonly bigint[])[],
  numTokens: number,
  force: boolean,
  limits: LookupLimits,
): string {
  const last = keys.map((k) => (k.length > 0 ? k[k.length - 1]!.toString(16) : '-'));
  return [
    numTokens,
    force ? 1 : 0,
    limits.maxLoadTokens ?? '',
    limits.skipReadingPrefixCache === true ? 1 : 0,
    ...last,
  ].join(':');
}
