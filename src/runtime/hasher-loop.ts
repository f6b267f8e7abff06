// The hasher role's loop body: for every occupied slot, hash up to a budget of
// new hash blocks (HasherRole.hash publishes keys after hashes). A small budget
// per wake-up plus a random pause after each publication makes keys trail
// token progress.
import { StaleHandleError } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { S_GENERATION } from '../layout.js';
import { Prng } from '../prng.js';
import { HasherRole } from '../roles/hasher.js';
import type { RuntimeViews } from './buffers.js';
import { AGAIN, HASHER_PAUSE_MS_MIN, park, pause, ringOthers } from './role-loop.js';
import type { RoleLoop, RoleWait } from './role-loop.js';
import { publishStat } from './stats.js';

export interface HasherLag {
  /** Hash blocks per slot per step. */
  hashesPerWake: number;
  /** After a step that published: a pause uniform in [0, jitterMs), not cut short by the doorbell (default 0). */
  jitterMs?: number;
  /** Seed of the pauses (default 1). */
  seed?: number;
}

export class HasherLoop implements RoleLoop {
  private readonly views: RuntimeViews;
  private readonly role: HasherRole;
  private readonly lag: HasherLag;
  private readonly random: Prng;
  private readonly wakeOthers: () => void;
  private hashes = 0;

  constructor(views: RuntimeViews, hashing: Hashing, lag: HasherLag) {
    this.views = views;
    this.role = new HasherRole(views.state, hashing);
    this.lag = lag;
    this.random = new Prng(lag.seed ?? 1, 0x4a54);
    this.wakeOthers = ringOthers(views, 'hasher');
  }

  /** After a publication: the lag pause (a random draw per publication), else at once; idle: park. */
  wait(did: boolean): RoleWait {
    if (!did) return park();
    const ms = this.random.next() * (this.lag.jitterMs ?? 0);
    return ms >= HASHER_PAUSE_MS_MIN ? pause(ms) : AGAIN;
  }

  stop(): void {}

  final(): Record<string, number> {
    return {};
  }

  /** One pass over the slots; true when any hash was published. */
  step(): boolean {
    const { state } = this.views;
    let added = 0;
    for (let slot = 0; slot < state.config.maxRequests; slot += 1) {
      const generation = Atomics.load(state.control, state.schedulerWord(slot, S_GENERATION));
      if ((generation & 1) === 0) continue;
      try {
        added += this.role.hash({ slot, generation }, this.lag.hashesPerWake);
      } catch (err) {
        // The slot was released between our read and the hash: nothing to do for it.
        if (!(err instanceof StaleHandleError)) throw err;
      }
    }
    this.hashes += added;
    if (added === 0) return false;
    publishStat(this.views.stats, 'hashesPublished', this.hashes);
    this.wakeOthers();
    return true;
  }
}
