// The scheduler role: request lifecycle and token progress. It is the only
// writer of the scheduler line and of the token array. Each method validates
// the handle and the transition before writing anything, so a rejected call
// changes nothing.
import {
  IllegalTransitionError,
  InvalidArgumentError,
  RequestCapacityError,
  SlotsExhaustedError,
} from '../errors.js';
import {
  NO_CAP,
  markDirty,
  S_COMPUTED_TOKENS,
  S_GENERATION,
  S_HIT_CHUNKS,
  S_MAX_OFFLOAD_TOKENS,
  S_NUM_TOKENS,
  S_PROMPT_TOKENS,
  S_REQUEST_ID,
  S_SCHEDULED_TOKENS,
  S_STATUS,
  Status,
} from '../layout.js';
import type { StatusCode } from '../layout.js';
import { DIGEST_BYTES, requestRoot, validateCacheSalt } from '../identity.js';
import type { SharedState } from '../state.js';
import { RoleClaim } from './claim.js';
import { IntInput } from './input.js';
import {
  DirtyBatch,
  HandleCopies,
  SlotMarks,
  batchLength,
  batchValues,
  checkHandle,
  ownHandle,
  statusName,
  statusOf,
} from './handle.js';
import type { RequestHandle } from './handle.js';

const TOKEN_MAX = 0x7fffffff;
const TOKEN_RULE = 'must be an integer token ID in [0, 2^31)';

export interface OpenRequest {
  /** The host's id for this request (a non-negative int32). */
  requestId: number;
  promptTokens: ArrayLike<number>;
  /** Cap on offloadable tokens; absent or null (vLLM's None) for none. */
  maxOffloadTokens?: number | null;
  /** Per group, chunks already loaded from the tier: the store cursor starts there. */
  hitChunks?: ArrayLike<number>;
  /**
   * vLLM's cache_salt: requests share tier entries only with requests of the
   * same salt (a non-empty string, at most CACHE_SALT_BYTES_MAX UTF-8 bytes);
   * no salt is a domain of its own. A lookup for this request must pass the same salt.
   */
  cacheSalt?: string;
}

export class SchedulerRole {
  readonly state: SharedState;
  /** Slots this scheduler knows to be free; private to the one scheduler thread. */
  private readonly freeSlots: number[];
  /** The scheduler role's owner word: this view writes only while it holds it. */
  private readonly claim: RoleClaim;
  /** progressBatch refuses a slot named twice. */
  private readonly named: SlotMarks;
  private readonly dirtyBatch: DirtyBatch;
  /**
   * What this view knows of the live requests it wrote, valid only while it
   * holds the claim without a break (no other view writes the scheduler line
   * then): per slot the live generation (0: nothing known), the computed and
   * the known tokens. A handle that matches is checked with plain reads of
   * this view's own memory; any other goes through checkHandle and the
   * shared words, as before. Dropped at hand-off and when the role is taken.
   */
  private readonly liveGeneration: Int32Array;
  private readonly ownComputed: Int32Array;
  private readonly ownKnown: Int32Array;
  /** Private copies of the caller's arrays (tokens, hits, a batch's progress), each read once. */
  private readonly input = new IntInput();
  private readonly auxInput = new IntInput(8);
  private readonly handleCopies = new HandleCopies();
  private readonly computedCopy: number[] = [];
  private readonly scheduledCopy: number[] = [];

  constructor(state: SharedState) {
    this.state = state;
    const slots = state.config.maxRequests;
    this.named = new SlotMarks(slots);
    this.dirtyBatch = new DirtyBatch(slots);
    this.liveGeneration = new Int32Array(slots);
    this.ownComputed = new Int32Array(slots);
    this.ownKnown = new Int32Array(slots);
    this.freeSlots = [];
    this.findFreeSlots();
    // A view that takes the role over from another finds the free slots
    // again, and knows nothing of the requests the other one wrote.
    this.claim = new RoleClaim(state, 'scheduler', () => {
      this.liveGeneration.fill(0);
      this.findFreeSlots();
    });
  }

  /**
   * This view stops driving the scheduler role so another view (usually on
   * another thread) can take it over; it may take it back later if free.
   */
  handOff(): void {
    this.liveGeneration.fill(0);
    this.claim.handOff();
  }

  /** True when `handle` is a live request this view wrote (see liveGeneration); reads no shared word. */
  private known(handle: RequestHandle): boolean {
    return (
      typeof handle === 'object' &&
      handle !== null &&
      Number.isInteger(handle.slot) &&
      handle.slot >= 0 &&
      handle.slot < this.liveGeneration.length &&
      handle.generation !== 0 &&
      this.liveGeneration[handle.slot] === handle.generation
    );
  }

  private findFreeSlots(): void {
    const { state } = this;
    this.freeSlots.length = 0;
    // Highest index first so pop() hands out slot 0 first.
    for (let slot = state.config.maxRequests - 1; slot >= 0; slot -= 1) {
      if ((Atomics.load(state.control, state.schedulerWord(slot, S_GENERATION)) & 1) === 0)
        this.freeSlots.push(slot);
    }
  }

  get freeSlotCount(): number {
    return this.freeSlots.length;
  }

  open(req: OpenRequest): RequestHandle {
    this.claim.check();
    const { config, control, tokens } = this.state;
    if (req === null || typeof req !== 'object') {
      throw new InvalidArgumentError('request', 'must be an object');
    }
    const requestId: unknown = req.requestId;
    if (
      typeof requestId !== 'number' ||
      !Number.isInteger(requestId) ||
      requestId < 0 ||
      requestId > 0x7fffffff
    ) {
      throw new InvalidArgumentError('requestId', 'must be an integer in [0, 2^31)');
    }
    // Every input is read once (see IntInput): what is written is what was checked.
    const promptIn = req.promptTokens;
    const promptLength = IntInput.lengthOf(
      promptIn,
      'promptTokens',
      config.maxTokensPerRequest,
      (n) => new RequestCapacityError('tokens per request', config.maxTokensPerRequest, n),
      'must be an array of token IDs',
    );
    const prompt = this.input.read(promptIn, promptLength, 'tokens', 0, TOKEN_MAX, TOKEN_RULE);
    // Absent means no cap; the internal no-cap value (-1) is not an accepted input.
    const capIn: unknown = req.maxOffloadTokens;
    let cap: number = NO_CAP;
    // null is vLLM's None: no cap, as absent.
    if (capIn !== undefined && capIn !== null) {
      if (
        typeof capIn !== 'number' ||
        !Number.isInteger(capIn) ||
        capIn < 0 ||
        capIn > 0x7fffffff
      ) {
        throw new InvalidArgumentError('maxOffloadTokens', 'must be an integer in [0, 2^31)');
      }
      cap = capIn;
    }
    const root = requestRoot(config, validateCacheSalt(req.cacheSalt));
    const hitsIn = req.hitChunks;
    let hits: Int32Array | undefined;
    if (hitsIn !== undefined) {
      const groups = this.state.groupCount;
      const wrongCount = () =>
        new InvalidArgumentError('hitChunks', `must have one entry per group (${groups})`);
      const n = IntInput.lengthOf(hitsIn, 'hitChunks', groups, wrongCount);
      if (n !== groups) throw wrongCount();
      hits = this.auxInput.read(
        hitsIn,
        n,
        'hitChunks',
        0,
        config.maxChunksPerRequest,
        `must be an integer in [0, ${config.maxChunksPerRequest}]`,
      );
    }
    if (this.freeSlots.length === 0) throw new SlotsExhaustedError(config.maxRequests);
    this.claim.take();
    const slot = this.freeSlots.pop()!;
    const w = (field: number) => this.state.schedulerWord(slot, field);
    const base = this.state.tokenBase(slot);
    tokens.set(prompt, base);
    this.state.roots.set(root, slot * DIGEST_BYTES);
    Atomics.store(control, w(S_REQUEST_ID), requestId);
    Atomics.store(control, w(S_PROMPT_TOKENS), prompt.length);
    Atomics.store(control, w(S_NUM_TOKENS), prompt.length);
    Atomics.store(control, w(S_COMPUTED_TOKENS), 0);
    Atomics.store(control, w(S_SCHEDULED_TOKENS), 0);
    Atomics.store(control, w(S_MAX_OFFLOAD_TOKENS), cap);
    for (let g = 0; g < this.state.groupCount; g += 1) {
      Atomics.store(control, w(S_HIT_CHUNKS + g), hits === undefined ? 0 : hits[g]!);
    }
    Atomics.store(control, w(S_STATUS), Status.waiting);
    // Publish last: a reader that sees the odd generation sees every field above.
    const generation = Atomics.load(control, w(S_GENERATION)) + 1;
    Atomics.store(control, w(S_GENERATION), generation);
    markDirty(this.state.dirty, slot);
    this.liveGeneration[slot] = generation;
    this.ownComputed[slot] = 0;
    this.ownKnown[slot] = prompt.length;
    return { slot, generation };
  }

  /** Appends sampled (or known) tokens; the count is published after the data. */
  appendTokens(handle: RequestHandle, newTokens: ArrayLike<number>): void {
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    this.expectLive(handle, 'append tokens to');
    const { control, tokens, config } = this.state;
    const countWord = this.state.schedulerWord(handle.slot, S_NUM_TOKENS);
    const n = Atomics.load(control, countWord);
    const max = config.maxTokensPerRequest;
    // Read once (see IntInput): a length that grew after the check wrote into the next slot.
    const length = IntInput.lengthOf(
      newTokens,
      'tokens',
      max,
      (k) => new RequestCapacityError('tokens per request', max, n + k),
      'must be an array of token IDs',
    );
    const added = this.input.read(newTokens, length, 'tokens', 0, TOKEN_MAX, TOKEN_RULE);
    if (n + length > max) throw new RequestCapacityError('tokens per request', max, n + length);
    this.claim.take();
    tokens.set(added, this.state.tokenBase(handle.slot) + n);
    Atomics.store(control, countWord, n + length);
    markDirty(this.state.dirty, handle.slot);
    if (this.known(handle)) this.ownKnown[handle.slot] = n + length;
  }

  /**
   * Publishes token progress: `computedTokens` whose KV is computed and
   * `scheduledTokens` in flight in the current batch. Marks the request running.
   * Computed tokens are known tokens: more than the request holds is refused
   * (tokens appended later would count as computed with no KV written, F4).
   * Scheduled tokens may run past them (speculative drafts).
   */
  progress(handle: RequestHandle, computedTokens: number, scheduledTokens = 0): void {
    handle = ownHandle(handle);
    this.claim.check();
    this.checkProgress(handle, computedTokens, scheduledTokens);
    this.claim.take();
    this.writeProgress(handle, computedTokens, scheduledTokens);
  }

  /**
   * `progress` for many requests in one call: entry i sets `handles[i]` to
   * `computedTokens[i]` (and `scheduledTokens[i]`, 0 when absent). The role's
   * claim is checked and taken once per batch and each handle is checked
   * once; every entry is validated before the first write, so a refused batch
   * (any bad entry, or a slot named twice) changes nothing.
   */
  progressBatch(
    handles: readonly RequestHandle[],
    computedTokens: ArrayLike<number>,
    scheduledTokens?: ArrayLike<number>,
  ): void {
    this.claim.check();
    const n = batchLength(handles);
    batchValues('computedTokens', computedTokens, n);
    batchValues('scheduledTokens', scheduledTokens, n);
    // Each entry is read once, in this one loop (see IntInput): the handles
    // and values checked and written below are these copies. checkProgress
    // checks the values as given (a non-number is refused, not coerced).
    const hs = this.handleCopies.copy(handles, n);
    const computed = this.computedCopy;
    const scheduled = this.scheduledCopy;
    computed.length = n;
    scheduled.length = n;
    for (let i = 0; i < n; i += 1) {
      computed[i] = computedTokens[i]!;
      scheduled[i] = scheduledTokens === undefined ? 0 : scheduledTokens[i]!;
    }
    this.named.begin();
    for (let i = 0; i < n; i += 1) {
      const h = hs[i]!;
      this.checkProgress(h, computed[i]!, scheduled[i]!);
      // Entries are checked against the published words: a slot named twice
      // would be checked against a value its own first entry replaces.
      this.named.once(h.slot, i);
    }
    this.claim.take();
    for (let i = 0; i < n; i += 1) {
      this.writeProgress(hs[i]!, computed[i]!, scheduled[i]!, false);
      this.dirtyBatch.add(hs[i]!.slot);
    }
    // One Atomics.or per bitmap word, after all of the batch's writes.
    this.dirtyBatch.raise(this.state.dirty);
  }

  /** Every check of `progress`; reads only. */
  private checkProgress(handle: RequestHandle, computedTokens: number, scheduledTokens: number) {
    const own = this.known(handle);
    if (!own) {
      checkHandle(this.state, handle);
      this.expectLive(handle, 'set progress of');
    }
    const max = this.state.config.maxTokensPerRequest;
    if (!Number.isInteger(computedTokens) || computedTokens < 0 || computedTokens > max) {
      throw new InvalidArgumentError('computedTokens', `must be an integer in [0, ${max}]`);
    }
    if (!Number.isInteger(scheduledTokens) || scheduledTokens < 0 || scheduledTokens > max) {
      throw new InvalidArgumentError('scheduledTokens', `must be an integer in [0, ${max}]`);
    }
    const { control } = this.state;
    const slot = handle.slot;
    const before = own
      ? this.ownComputed[slot]!
      : Atomics.load(control, this.state.schedulerWord(slot, S_COMPUTED_TOKENS));
    if (computedTokens < before) {
      throw new InvalidArgumentError(
        'computedTokens',
        `must not go back (${before} -> ${computedTokens}) except by preempt`,
      );
    }
    const known = own
      ? this.ownKnown[slot]!
      : Atomics.load(control, this.state.schedulerWord(slot, S_NUM_TOKENS));
    if (computedTokens > known) {
      throw new InvalidArgumentError(
        'computedTokens',
        `must not exceed the ${known} tokens the request holds`,
      );
    }
  }

  /**
   * Writes a checked progress; the claim is held, so this view now knows the
   * request. `mark` false: the caller raises the dirty bit after its batch.
   */
  private writeProgress(
    handle: RequestHandle,
    computedTokens: number,
    scheduledTokens: number,
    mark = true,
  ) {
    const { control } = this.state;
    const slot = handle.slot;
    Atomics.store(control, this.state.schedulerWord(slot, S_SCHEDULED_TOKENS), scheduledTokens);
    Atomics.store(control, this.state.schedulerWord(slot, S_COMPUTED_TOKENS), computedTokens);
    Atomics.store(control, this.state.schedulerWord(slot, S_STATUS), Status.running);
    if (mark) markDirty(this.state.dirty, slot);
    if (!this.known(handle)) {
      // Learned once per request and claim: read while the claim is held, so they stay true.
      this.ownKnown[slot] = Atomics.load(control, this.state.schedulerWord(slot, S_NUM_TOKENS));
      this.liveGeneration[slot] = handle.generation;
    }
    this.ownComputed[slot] = computedTokens;
  }

  /** Preemption (recompute): progress restarts from zero; the allocator clears the blocks. */
  preempt(handle: RequestHandle): void {
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    this.expectLive(handle, 'preempt');
    this.claim.take();
    const { control } = this.state;
    Atomics.store(control, this.state.schedulerWord(handle.slot, S_STATUS), Status.preempted);
    Atomics.store(control, this.state.schedulerWord(handle.slot, S_SCHEDULED_TOKENS), 0);
    Atomics.store(control, this.state.schedulerWord(handle.slot, S_COMPUTED_TOKENS), 0);
    markDirty(this.state.dirty, handle.slot);
    this.ownComputed[handle.slot] = 0;
  }

  /** Normal finish: the store role takes one final pass with the finished horizon. */
  finish(handle: RequestHandle): void {
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    this.expectLive(handle, 'finish');
    this.claim.take();
    this.end(handle, Status.finished);
  }

  /** Abort (queued or running): only computed tokens remain offloadable. */
  abort(handle: RequestHandle): void {
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    this.expectLive(handle, 'abort');
    this.claim.take();
    this.end(handle, Status.aborted);
  }

  /** Frees the slot; the handle (and every copy of it) becomes stale. */
  release(handle: RequestHandle): void {
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    this.claim.take();
    const { control } = this.state;
    Atomics.store(control, this.state.schedulerWord(handle.slot, S_STATUS), Status.free);
    Atomics.store(
      control,
      this.state.schedulerWord(handle.slot, S_GENERATION),
      handle.generation + 1,
    );
    markDirty(this.state.dirty, handle.slot);
    this.liveGeneration[handle.slot] = 0;
    this.freeSlots.push(handle.slot);
  }

  private end(handle: RequestHandle, status: StatusCode): void {
    const { control } = this.state;
    this.liveGeneration[handle.slot] = 0; // ended: no longer live for progress
    Atomics.store(control, this.state.schedulerWord(handle.slot, S_SCHEDULED_TOKENS), 0);
    Atomics.store(control, this.state.schedulerWord(handle.slot, S_STATUS), status);
    // Without this bit an ended request would never get its final pass.
    markDirty(this.state.dirty, handle.slot);
  }

  private expectLive(handle: RequestHandle, event: string): void {
    const status = statusOf(this.state, handle.slot);
    if (status === Status.finished || status === Status.aborted || status === Status.free) {
      throw new IllegalTransitionError(event, statusName(status));
    }
  }
}
