// The store thread's side of KV events: what each tier change is, in raw
// facts, onto the bounded queue to main (queue.ts). A chunk's tokens and its
// parent key are read when its store job is dispatched, while the request
// still holds its slot (by the time the copy completes the slot may hold
// another request), and kept until the host tier publishes the entry or the
// copy fails. Nothing here waits: a full queue drops and counts.
import type { Config } from '../config.js';
import type { StoreJob } from '../job.js';
import type { SharedState } from '../state.js';
import type { TierEvent } from '../tier/types.js';
import type { LevelEvent, TierName } from '../tier/lower.js';
import { EventQueueWriter, NO_GROUP } from './queue.js';
import type { Medium } from './types.js';

interface Captured {
  readonly group: number;
  readonly parent: bigint | null;
  readonly tokens: Int32Array | null;
}

const MEDIUM_OF: Readonly<Record<TierName, Medium>> = { host: 'CPU', disk: 'DISK', redis: 'REDIS' };

export class EventCapture {
  readonly queue: EventQueueWriter;
  /** Chunks dispatched or promoted and not yet published by the host tier. */
  private readonly pending = new Map<bigint, Captured>();

  constructor(
    buffer: SharedArrayBuffer,
    private readonly state: SharedState,
    private readonly config: Config,
  ) {
    this.queue = new EventQueueWriter(buffer);
  }

  /** A store job left for the copy: keep each chunk's group, parent key and tokens. */
  dispatched(job: StoreJob): void {
    const { state } = this;
    const tokenBase = state.tokenBase(job.slot);
    for (const c of job.chunks) {
      const tpc = this.config.groups[c.group]!.tokensPerChunk;
      const from = tokenBase + c.chunk * tpc;
      const parent =
        c.chunk > 0 ? state.keys[state.keyBase(job.slot, c.group) + c.chunk - 1]! : null;
      this.pending.set(c.key, {
        group: c.group,
        parent,
        tokens: state.tokens.slice(from, from + tpc),
      });
    }
  }

  /**
   * The job ended and the host tier's events for it were taken: forget what
   * is left (a failed copy's chunks, never published, are never announced).
   */
  settled(job: StoreJob): void {
    for (const c of job.chunks) this.pending.delete(c.key);
  }

  /** A chunk promoted from a lower level into host memory (its tokens are not known here). */
  promoted(key: bigint, group: number, parent: bigint | null): void {
    this.pending.set(key, { group, parent, tokens: null });
  }

  /**
   * The host tier's events, in order. `groupOf` answers for an entry still
   * indexed (removals are taken before the store forgets the entry).
   */
  host(events: readonly TierEvent[], groupOf: (key: bigint) => number | undefined): void {
    for (const e of events) {
      if (e.kind === 'stored') {
        for (const key of e.keys) {
          const c = this.pending.get(key);
          this.pending.delete(key);
          this.queue.stored(
            'CPU',
            c?.group ?? groupOf(key) ?? NO_GROUP,
            key,
            c?.parent ?? null,
            c?.tokens ?? null,
          );
        }
      } else {
        // One BlockRemoved per group, as vLLM keeps group_idx unambiguous.
        const byGroup = new Map<number, bigint[]>();
        for (const key of e.keys) {
          const g = groupOf(key) ?? NO_GROUP;
          let keys = byGroup.get(g);
          if (keys === undefined) byGroup.set(g, (keys = []));
          keys.push(key);
        }
        for (const [g, keys] of byGroup) this.queue.removed('CPU', g, keys);
      }
    }
  }

  /**
   * A lower level's events: the key and the medium (the level indexes entries
   * by key alone). `lost` events its own bounded log could not keep count as dropped.
   */
  lower(level: TierName, events: readonly LevelEvent[], lost: number): void {
    this.queue.dropped += lost;
    const medium = MEDIUM_OF[level];
    let removed: bigint[] = [];
    for (const e of events) {
      if (e.kind === 'stored') {
        if (removed.length > 0) this.queue.removed(medium, NO_GROUP, removed);
        removed = [];
        this.queue.stored(medium, NO_GROUP, e.key, null, null);
      } else removed.push(e.key);
    }
    if (removed.length > 0) this.queue.removed(medium, NO_GROUP, removed);
  }

  /** Every entry was dropped. */
  cleared(): void {
    this.pending.clear();
    this.queue.cleared();
  }
}
