// A planning visit's two reads of one snapshot: every group's store window
// from the one rule (with the tally of what the visit must do), and the
// entries of those windows, the chunks to offer the tier and those passed
// without a copy. The planner (planner.ts) pins, offers and dispatches them.
import type { Config, GroupConfig } from './config.js';
import { invariant } from './errors.js';
import { Status } from './layout.js';
import {
  keysExpected,
  offloadableTokens,
  readyPrefix,
  storeReachable,
  storeWindow,
  tokenChunks,
} from './ready.js';
import type { RequestFacts, StorePolicy, StoreWindow } from './ready.js';
import type { PassReport, PassedOver } from './planner-report.js';
import type { RequestSnapshot, StoreRole } from './roles/store.js';

/** What a visit reads and fills in: one object per planner, its parts refilled per visit. */
export interface PlanVisit {
  readonly role: StoreRole;
  readonly snap: RequestSnapshot;
  readonly config: Config;
  readonly groupCount: number;
  readonly policy: StorePolicy;
  readonly windows: StoreWindow[];
  readonly tally: Tally;
  readonly reporter: PassReport;
  /** Per group: alignmentChunks (null: every chunk reachable). */
  readonly alignment: (number | null)[];
  /** The broken variants these reads know (each off in the shipped planner). */
  readonly switches: {
    readonly storeLastSampled: boolean;
    readonly eagleCursorUnexcluded: boolean;
    readonly dropDeferred: boolean;
    readonly reachabilityOneShort: boolean;
  };
}

/**
 * Every group's store window from the one rule, into `windows`, and the
 * pass's tally: chunks to offer, token-ready chunks not ready (deferred, of
 * which a legacy policy's cursor passes some: skipped), keys still to come
 * for an ended request, and whether any cursor moves.
 */
export function decideWindows(v: PlanVisit, ended: boolean): void {
  const { snap, config, windows, tally, reporter } = v;
  const bpc = config.blocksPerChunk;
  const offloadable =
    v.switches.storeLastSampled && snap.status === Status.finished
      ? lastSampledCounted(snap, config)
      : offloadableTokens(snap, config);
  tally.candidates = 0;
  tally.deferred = 0;
  tally.skipped = 0;
  tally.keysPending = false;
  tally.advances = false;
  for (let g = 0; g < v.groupCount; g += 1) {
    const group = config.groups[g]!;
    const w = storeWindow(
      v.policy,
      tokenChunks(snap, group, offloadable),
      snap.keyCount[g]!,
      snap.blockCount[g]!,
      snap.cursor[g]!,
      g,
      bpc,
      windows[g]!,
    );
    if (v.switches.eagleCursorUnexcluded && group.eagle) {
      // The broken variant: the cursor moves to the ready prefix without the exclusion.
      const all = readyPrefix(
        Math.floor(offloadable / group.tokensPerChunk),
        snap.keyCount[g]!,
        snap.blockCount[g]!,
        bpc,
      );
      if (all > w.advanceTo) w.advanceTo = all;
    }
    // The old length assertion, kept after the ready bound as a guard: both
    // slices have exactly end - start entries whatever the policy.
    // Tested before the message is built: this runs for every request-group of every pass.
    if (w.end !== w.start && w.end > snap.keyCount[g]!) {
      invariant(false, `group ${g}: window end ${w.end} within ${snap.keyCount[g]} keys`);
    }
    if (w.end !== w.start && w.end * bpc > snap.blockCount[g]!) {
      invariant(false, `group ${g}: window end ${w.end} within ${snap.blockCount[g]} blocks`);
    }
    tally.candidates += w.end - w.start;
    reporter.deferredFrom[g] = Math.max(w.ready, w.start);
    tally.deferred += Math.max(0, w.tokenChunks - reporter.deferredFrom[g]!);
    // Of those, the ones below advanceTo are passed by the cursor (skipped, a
    // legacy policy's holes); only the rest wait for a later pass.
    reporter.waitingFrom[g] = Math.min(
      w.tokenChunks,
      Math.max(reporter.deferredFrom[g]!, w.advanceTo),
    );
    tally.skipped += Math.max(0, reporter.waitingFrom[g]! - reporter.deferredFrom[g]!);
    // Keys of token-ready chunks the hasher has yet to publish (it hashes
    // every known token of an occupied slot, so these always come).
    if (
      ended &&
      snap.keyCount[g]! < Math.min(w.tokenChunks, keysExpected(snap.numTokens, group, config))
    )
      tally.keysPending = true;
    // The unsafe variant acknowledges deferred chunks: counted above as deferred, passed by the cursor.
    if (v.switches.dropDeferred && w.tokenChunks > w.advanceTo) w.advanceTo = w.tokenChunks;
    if (w.advanceTo > snap.cursor[g]!) tally.advances = true;
  }
}

/**
 * The entries of every window: the chunks to offer, and those passed without a
 * copy (null, unreachable). Arrays are sized before they are filled: this runs
 * for every chunk the store ever copies, and an empty array grown by push
 * takes room for 16 entries, which made the planner allocate about 670 bytes
 * per chunk and the store thread stop for a young-generation collection
 * (about 1 ms here) several times a second under load.
 */
export function readOffer(v: PlanVisit): Offer {
  const { role, snap, config, windows } = v;
  const bpc = config.blocksPerChunk;
  const observed = v.reporter.chunks;
  let inWindows = 0;
  for (let g = 0; g < v.groupCount; g += 1) inWindows += windows[g]!.end - windows[g]!.start;
  const keys = new Array<bigint>(inWindows);
  const chunks = new Array<Candidate>(inWindows);
  let n = 0;
  const offer: Offer = {
    keys,
    chunks,
    nulls: 0,
    unreachable: 0,
    nullChunks: observed ? [] : undefined,
    unreachableChunks: observed ? [] : undefined,
  };
  for (let g = 0; g < v.groupCount; g += 1) {
    const w = windows[g]!;
    const group = config.groups[g]!;
    const alignment = v.alignment[g]!;
    for (let c = w.start; c < w.end; c += 1) {
      if (role.block(snap, g, c * bpc + bpc - 1) === 0) {
        offer.nulls += 1; // the deciding block slid out of the window: nothing to store
        offer.nullChunks?.push(g, c);
        continue;
      }
      if (!reachable(v, group, alignment, c, w.ready)) {
        offer.unreachable += 1; // no aligned hit can use it: passed, never copied
        offer.unreachableChunks?.push(g, c);
        continue;
      }
      const key = role.key(snap, g, c);
      keys[n] = key;
      chunks[n] = candidate(role, snap, g, c, bpc, key);
      n += 1;
    }
  }
  // Trimmed in place (no copy): every entry below n was written.
  keys.length = n;
  chunks.length = n;
  return offer;
}

/** One chunk's copy: its non-null blocks (a sliding window nulls the oldest) and their positions. */
function candidate(
  role: PlanVisit['role'],
  snap: PlanVisit['snap'],
  g: number,
  c: number,
  bpc: number,
  key: bigint,
): Candidate {
  let count = 0;
  for (let i = 0; i < bpc; i += 1) if (role.block(snap, g, c * bpc + i) !== 0) count += 1;
  const blocks = new Array<number>(count);
  const positions = new Array<number>(count);
  let k = 0;
  for (let i = 0; i < bpc; i += 1) {
    const b = role.block(snap, g, c * bpc + i);
    if (b === 0) continue;
    blocks[k] = b;
    positions[k] = c * bpc + i;
    k += 1;
  }
  return { group: g, chunk: c, key, tierSlot: -1, blocks, positions };
}

/** storeReachable, or its broken variant (unsafeReachabilityOneShort). */
function reachable(
  v: PlanVisit,
  group: GroupConfig,
  alignment: number | null,
  chunk: number,
  ready: number,
): boolean {
  if (!storeReachable(group, alignment, chunk, ready)) return false;
  if (!v.switches.reachabilityOneShort || alignment === null) return true;
  // The broken variant: the first reachable chunk of its segment counts as unreachable.
  return chunk % alignment !== 0 && storeReachable(group, alignment, chunk - 1, ready);
}

/**
 * The broken variant of F4 (unsafeStoreLastSampledToken): a finished request's
 * tokens up to and including the last sampled one, as if all were computed.
 */
function lastSampledCounted(snap: Readonly<RequestSnapshot>, config: Config): number {
  return offloadableTokens(
    {
      ...snapFacts(snap),
      status: Status.running,
      computedTokens: snap.numTokens,
      scheduledTokens: 0,
    },
    config,
  );
}

function snapFacts(snap: Readonly<RequestSnapshot>): RequestFacts {
  return {
    status: snap.status,
    promptTokens: snap.promptTokens,
    numTokens: snap.numTokens,
    computedTokens: snap.computedTokens,
    scheduledTokens: snap.scheduledTokens,
    maxOffloadTokens: snap.maxOffloadTokens,
  };
}

/** What one planning visit reads to offer: the chunks and their keys, and the chunks it passes without a copy. */
export interface Offer extends PassedOver {
  readonly keys: bigint[];
  readonly chunks: Candidate[];
  nulls: number;
  unreachable: number;
}

/** A pass's tally over the groups of one slot (one object per planner, refilled per visit). */
export interface Tally {
  /** Chunks in the windows, to read and offer. */
  candidates: number;
  /** Token-ready chunks not ready at this pass. */
  deferred: number;
  /** Of those, the ones a legacy policy's cursor passes. */
  skipped: number;
  /** An ended request's keys still to come from the hasher. */
  keysPending: boolean;
  /** Some cursor moves. */
  advances: boolean;
}

/** A chunk offered to the tier; once the tier gives it a slot it is the job's ChunkCopy as it is (one object per chunk). */
interface Candidate {
  readonly group: number;
  readonly chunk: number;
  readonly key: bigint;
  tierSlot: number;
  readonly blocks: number[];
  readonly positions: number[];
}
