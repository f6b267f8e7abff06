// The store thread's side of the cascade: write-through of published host
// entries, and, for a lookup whose host prefix is shorter than asked, a
// resolution over the lower levels that promotes what they hold into the host
// tier before the lookup is answered. A resolution runs asynchronously on the
// store thread's event loop; while it runs (or while a lower level answers
// "pending" for a key being written) the lookup waits, bounded by the store
// loop's LOOKUP_WAIT_MS_MAX like any other wait. A promoted entry was checked
// (header, length, CRC) on its way up, is written into a host slot by this
// thread and published like a store; the engine then loads it into GPU blocks
// and checks those against the key, as for every host hit.
import type { RuntimeViews } from './buffers.js';
import type { HostTier } from '../tier/host-tier.js';
import type { TierCascade, LowerState } from '../tier/cascade.js';
import type { LowerTier } from '../tier/lower.js';

export interface ReadableEntry {
  readonly slot: number;
  readonly positions: readonly number[];
  /** The store's reset count when it became readable (the runtime fuzzer's oracle reads it). */
  readonly resets: number;
  readonly group: number;
}

/** What a resolution needs from the lookup record it serves. */
export interface LookupView {
  readonly count: number;
  key(group: number, chunk: number): bigint;
  /** The store loop's prefix rule over a presence predicate. */
  prefixHit(present: (k: bigint) => boolean): number;
}

/**
 * A chunk of the hit a resolution meant to promote that its level did not
 * give back (refused by its checks: a bad checksum or tag, another chunk's
 * entry; or gone since it answered): a load failure, as in vLLM, where a
 * load job that fails invalidates its blocks.
 */
export interface LowerLoadFailure {
  /** The hit stops before this chunk (the chunks before it were promoted). */
  readonly firstFailedChunk: number;
  /** The hit, in chunks, had every chunk come back. */
  readonly hitChunks: number;
}

interface Run {
  state: 'running' | 'pending' | 'done';
  /**
   * The lookup it serves was answered (cut short by the budget, or asked
   * with force), or its request ended: it reads nothing more from below (what
   * it already read is still promoted, for a later lookup).
   */
  ended: boolean;
  retryAtMs: number;
  /** Keys this resolution promoted into the host tier, with the level each came from (lower-level hits, not host hits). */
  promoted: Map<bigint, 'disk' | 'redis'>;
  /** A chunk of the hit its level failed to give back (the last resolution's). */
  failure?: LowerLoadFailure;
  startedAtMs: number;
}

/**
 * Chunks [from, to) of group `g` the lookup decision reads to answer a hit
 * of `hit` chunks (src/lookup.ts): a full-attention group its prefix, a
 * windowed group its window below the hit; an EAGLE group one chunk more (the
 * draft's tail, which the decision queries and then drops).
 */
function decisionChunks(
  g: { readonly windowChunks: number | null; readonly eagle: boolean },
  hit: number,
  count: number,
): [number, number] {
  const to = Math.min(count, hit + (g.eagle ? 1 : 0));
  const from = g.windowChunks === null ? 0 : Math.max(0, hit - g.windowChunks);
  return [Math.min(from, to), to];
}

/** Where a chunk to promote comes from: its group, its parent's key, the level holding it. */
interface Where {
  readonly group: number;
  readonly parent: bigint | null;
  readonly level: 'disk' | 'redis';
  readonly from: LowerTier;
}

/** Resolutions not asked about for this long are dropped (their request is gone). */
const RUN_AGE_MS_MAX = 60_000;

/** A lower level answered "pending": look again after this long. */
const PENDING_RETRY_MS = 5;

/** A payload being read for one or more resolutions: read once, wanted while any of them wants it. */
interface Reading {
  readonly payload: Promise<Buffer | undefined>;
  readonly wanted: (() => boolean)[];
}

export class LowerLookups {
  private readonly runs = new Map<number, Run>();
  /**
   * Payloads being read, by key: a resolution that needs a key another one is
   * reading waits for that read instead of reading it again (two requests
   * behind one prefix, or an external host asking again under a new tag).
   */
  private readonly reading = new Map<
    bigint,
    Reading
  >(); /** Resolutions that ran out of the lookup budget (answered from the host tier alone). */
  cutShort = 0;
  /** Resets so far: a resolution that began before the last one promotes nothing. */
  private resets = 0;
  private readonly bpc: number;
  private readonly payloadBytes: number;

  constructor(
    readonly cascade: TierCascade,
    private readonly views: RuntimeViews,
    private readonly host: HostTier,
    private readonly readable: Map<bigint, ReadableEntry>,
    /** Drops readable entries the host tier evicted (called right after a promotion allocates). */
    private readonly syncEvictions: () => void,
    /** Wakes the store loop when a resolution finished. */
    private readonly wake: () => void,
    /** The store loop's reset count (what a promoted entry records). */
    private readonly storeResets: () => number,
    /** Told of each chunk promoted into host memory (KV events), with its group and parent key. */
    private readonly onPromoted?: (key: bigint, group: number, parent: bigint | null) => void,
  ) {
    this.bpc = views.config.blocksPerChunk;
    this.payloadBytes = this.bpc * views.config.bytesPerBlock;
  }

  get running(): number {
    return this.runs.size;
  }

  /** Offers a just-published full host entry to every lower level (each seals its own copy). */
  writeThrough(key: bigint, slot: number): void {
    const from = slot * this.payloadBytes;
    this.cascade.writeThrough(key, new Uint8Array(this.views.tier.buffer, from, this.payloadBytes));
  }

  /**
   * Why the lookup `tag` must wait for the lower levels, or null once they
   * answered: 'retry' while a resolution runs (the first call starts one;
   * nothing is known yet), 'pending' when a level holds a key still being
   * written (another resolution starts after PENDING_RETRY_MS).
   */
  mustWait(tag: number, view: LookupView): 'retry' | 'pending' | null {
    const run = this.runs.get(tag);
    if (run === undefined) {
      this.start(tag, view, new Map());
      return 'retry';
    }
    if (run.state === 'running') return 'retry';
    if (run.state === 'pending') {
      if (performance.now() >= run.retryAtMs) this.start(tag, view, run.promoted);
      return 'pending';
    }
    return null;
  }

  /** At a reset: every resolution under way is forgotten, reads nothing more, and promotes nothing when it ends. */
  reset(): void {
    this.resets += 1;
    for (const run of this.runs.values()) run.ended = true;
    this.runs.clear();
    // A read begun before the reset may bring a retired entry: no later resolution joins it.
    this.reading.clear();
  }

  /** The lookup was answered: forget its resolution (it reads nothing more); returns the keys it promoted and a load failure, if any. */
  finish(tag: number): {
    readonly promoted: ReadonlyMap<bigint, 'disk' | 'redis'>;
    readonly failure: LowerLoadFailure | undefined;
  } {
    const run = this.runs.get(tag);
    if (run === undefined) return { promoted: new Map(), failure: undefined };
    run.ended = true;
    this.runs.delete(tag);
    return { promoted: run.promoted, failure: run.failure };
  }

  /**
   * The request behind lookup `tag` ended without being answered (aborted
   * while it waited to ask again): its resolution reads nothing more.
   */
  forget(tag: number): void {
    this.finish(tag);
  }

  private start(tag: number, view: LookupView, promoted: Map<bigint, 'disk' | 'redis'>): void {
    // A request that ended while deferred never asks again: forget resolutions that old.
    const now = performance.now();
    for (const [t, r] of this.runs) if (now - r.startedAtMs > RUN_AGE_MS_MAX) this.finish(t);
    const run: Run = { state: 'running', ended: false, retryAtMs: 0, promoted, startedAtMs: now };
    this.runs.set(tag, run);
    // A slow shard holds no admission longer than the budget: the lookup is
    // then answered from what is in host memory (what the resolution promotes
    // later still lands there, for the next lookup).
    const budget = setTimeout(() => {
      if (this.runs.get(tag) !== run || run.state !== 'running') return;
      run.state = 'done';
      // Answered from host memory next: nothing read from here on could be loaded by it.
      run.ended = true;
      this.cutShort += 1;
      this.wake();
    }, this.cascade.lookupBudgetMs);
    this.resolve(view, run).then(
      (pending) => {
        clearTimeout(budget);
        if (this.runs.get(tag) !== run || run.state !== 'running') return; // answered meanwhile
        run.state = pending ? 'pending' : 'done';
        run.retryAtMs = performance.now() + PENDING_RETRY_MS;
        this.wake();
      },
      () => {
        clearTimeout(budget);
        // A level broke its never-reject contract: answer from the host tier alone.
        if (this.runs.get(tag) === run) run.state = 'done';
        this.wake();
      },
    );
  }

  /** Resolves and promotes; true when a key of the prefix is still being written at a lower level. */
  private async resolve(view: LookupView, run: Run): Promise<boolean> {
    const resets = this.resets;
    const groups = this.views.config.groups;
    const inHost = (k: bigint) => this.readable.get(k)?.positions.length === this.bpc;
    const hostHit = view.prefixHit(inHost);
    if (hostHit >= view.count) return false;
    const found = new Map<bigint, LowerState>();
    const windowed = new Set<bigint>();
    for (const g of groups) {
      if (g.windowChunks === null) continue;
      for (let c = 0; c < view.count; c += 1) windowed.add(view.key(g.index, c));
    }
    // Round 1: full-attention chunks past the host prefix, chunk-major (prefix order).
    const ask: bigint[] = [];
    for (let c = hostHit; c < view.count; c += 1) {
      for (const g of groups) {
        if (g.windowChunks !== null) continue;
        const k = view.key(g.index, c);
        if (!inHost(k)) ask.push(k);
      }
    }
    for (const [k, s] of await this.cascade.resolve(ask)) found.set(k, s);
    if (run.ended) return false;
    const lowerHit = (k: bigint) => found.get(k)?.state === 'hit';
    const fullBound = view.prefixHit((k) => windowed.has(k) || inHost(k) || lowerHit(k));
    // Round 2: the windowed groups' chunks inside their window at that bound.
    const ask2: bigint[] = [];
    for (const g of groups) {
      if (g.windowChunks === null) continue;
      const [from, to] = decisionChunks(g, fullBound, view.count);
      for (let c = from; c < to; c += 1) {
        const k = view.key(g.index, c);
        if (!inHost(k)) ask2.push(k);
      }
    }
    for (const [k, s] of await this.cascade.resolve(ask2)) found.set(k, s);
    if (run.ended) return false;
    for (const s of found.values()) if (s.state === 'pending') return true;
    const hit = view.prefixHit((k) => inHost(k) || lowerHit(k));
    if (hit <= hostHit) return false;
    // Fetch (and check) exactly what the lookup will read to answer that hit,
    // and nothing it cannot use: every chunk the decision reads, the EAGLE
    // tail included (without it the hit shrank by one chunk, and with a
    // sliding window the window moved onto chunks never fetched: the default
    // hybrid model's warm restart read 559 chunks and loaded none).
    // Chunk-major, so a host tier short of room (promote() halves the list)
    // keeps the lowest chunks of every group, and a parent precedes its child.
    const needed: bigint[] = [];
    const chunkOf = new Map<bigint, number>();
    const where = new Map<bigint, Where>();
    const ranges = groups.map((g) => decisionChunks(g, hit, view.count));
    const end = Math.max(0, ...ranges.map(([, to]) => to));
    for (let c = 0; c < end; c += 1) {
      for (const [i, g] of groups.entries()) {
        const [from, to] = ranges[i]!;
        if (c < from || c >= to) continue;
        const k = view.key(g.index, c);
        if (!inHost(k) && lowerHit(k)) {
          needed.push(k);
          chunkOf.set(k, c);
          where.set(k, {
            group: g.index,
            parent: c > 0 ? view.key(g.index, c - 1) : null,
            level: found.get(k)!.level!.name,
            from: found.get(k)!.level!,
          });
        }
      }
    }
    const reads = await this.readAll(run, needed, chunkOf, where);
    try {
      this.promoteRead(view, run, reads.got, needed, where, resets);
    } finally {
      // Promoted (or not): a resolution that needs one of these keys from now on reads it again.
      reads.release();
    }
    return false;
  }

  /**
   * Reads `needed` (chunk-major) from the levels holding them, each key once
   * across resolutions. A read that fails ends the hit before its chunk: no
   * group's decision at that shorter hit reads a chunk at or past it, so the
   * reads still waiting for their turn there read nothing; nor does any once
   * the lookup is answered or its request gone. `release()` forgets the reads
   * this resolution began, once their payloads are promoted.
   */
  private async readAll(
    run: Run,
    needed: readonly bigint[],
    chunkOf: ReadonlyMap<bigint, number>,
    where: ReadonlyMap<bigint, Where>,
  ): Promise<{ got: Map<bigint, Buffer>; release(): void }> {
    let shortAt = Infinity;
    const began: [bigint, Reading][] = [];
    const payloads = await Promise.all(
      needed.map(async (k) => {
        const c = chunkOf.get(k)!;
        const p = await this.read(k, where.get(k)!.from, () => !run.ended && c < shortAt, began);
        if (p === undefined) shortAt = Math.min(shortAt, c);
        return p;
      }),
    );
    const got = new Map<bigint, Buffer>();
    needed.forEach((k, i) => {
      const p = payloads[i];
      if (p !== undefined) got.set(k, p);
    });
    const release = () => {
      for (const [k, r] of began) if (this.reading.get(k) === r) this.reading.delete(k);
    };
    return { got, release };
  }

  /** Promotes what the lookup's decision reads at the hit the payloads read now give. */
  private promoteRead(
    view: LookupView,
    run: Run,
    got: ReadonlyMap<bigint, Buffer>,
    needed: readonly bigint[],
    where: ReadonlyMap<bigint, Where>,
    resets: number,
  ): void {
    const groups = this.views.config.groups;
    const inHost = (k: bigint) => this.readable.get(k)?.positions.length === this.bpc;
    // The host tier may have changed while we awaited: recompute on what is there now.
    const final = view.prefixHit((k) => inHost(k) || got.has(k));
    // A chunk a level failed to give back ends the hit: a load failure. Reads
    // skipped because the lookup was answered or its request gone are not.
    const lost = new Set(needed.filter((k) => !got.has(k)));
    if (lost.size > 0 && !run.ended) {
      const meant = view.prefixHit((k) => inHost(k) || got.has(k) || lost.has(k));
      if (meant > final) run.failure = { firstFailedChunk: final, hitChunks: meant };
    }
    const within = new Set<bigint>();
    for (const g of groups) {
      const [from, to] = decisionChunks(g, final, view.count);
      for (let c = from; c < to; c += 1) within.add(view.key(g.index, c));
    }
    const keys = needed.filter((k) => got.has(k) && !inHost(k) && within.has(k));
    // Fetched before a reset (perhaps from entries a shared reset retired since): not promoted.
    if (resets !== this.resets) return;
    this.promote(keys, got, run.promoted, where);
  }

  /**
   * Reads `key`'s payload from `level`, or joins a read of it under way or
   * done and not yet released (recorded in `began` when this call begins it).
   */
  private read(
    key: bigint,
    level: LowerTier,
    wanted: () => boolean,
    began: [bigint, Reading][],
  ): Promise<Buffer | undefined> {
    const under = this.reading.get(key);
    if (under !== undefined) {
      under.wanted.push(wanted);
      return under.payload;
    }
    // The list exists before the fetch starts: the limiter may ask it at once.
    const wanters = [wanted];
    const reading: Reading = {
      wanted: wanters,
      payload: this.cascade.fetch(key, level, () => wanters.some((w) => w())),
    };
    this.reading.set(key, reading);
    began.push([key, reading]);
    return reading.payload;
  }

  /**
   * Writes checked payloads into host slots and publishes them (this thread
   * owns the host tier). If the host cannot make room for all, a shorter
   * prefix of the list is tried; what is not promoted is simply not a hit.
   */
  private promote(
    keys: bigint[],
    payloads: ReadonlyMap<bigint, Buffer>,
    promoted: Map<bigint, 'disk' | 'redis'>,
    where: ReadonlyMap<bigint, Where>,
  ): void {
    let offer = keys;
    while (offer.length > 0) {
      const r = this.host.prepareStore(offer);
      if (!r.ok) {
        offer = offer.slice(0, Math.floor(offer.length / 2));
        continue;
      }
      this.syncEvictions();
      const positions = Array.from({ length: this.bpc }, (_, p) => p);
      r.keysToStore.forEach((k, i) => {
        const slot = r.slots[i]!;
        const w = where.get(k)!;
        this.onPromoted?.(k, w.group, w.parent);
        const dest = new Uint8Array(
          this.views.tier.buffer,
          slot * this.payloadBytes,
          this.payloadBytes,
        );
        dest.set(payloads.get(k)!);
      });
      this.host.completeStore(r.keysToStore, true);
      r.keysToStore.forEach((k, i) => {
        const w = where.get(k)!;
        this.readable.set(k, {
          slot: r.slots[i]!,
          positions,
          group: w.group,
          resets: this.storeResets(),
        });
        promoted.set(k, w.level);
      });
      return;
    }
  }
}
