// The hasher role's loop body: for every occupied slot, hash up to a budget of
// new hash blocks (HasherRole.hash publishes keys after hashes). A small budget
// per wake-up plus jitter between wake-ups makes keys trail token progress.
import { StaleHandleError } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { S_GENERATION } from '../layout.js';
import { HasherRole } from '../roles/hasher.js';
import type { RuntimeViews } from './buffers.js';
import { publishStat } from './stats.js';

export interface HasherLag {
  /** Hash blocks per slot per step. */
  hashesPerWake: number;
}

export class HasherLoop {
  private readonly views: RuntimeViews;
  private readonly role: HasherRole;
  private readonly lag: HasherLag;
  private hashes = 0;

  constructor(views: RuntimeViews, hashing: Hashing, lag: HasherLag) {
    this.views = views;
    this.role = new HasherRole(views.state, hashing);
    this.lag = lag;
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
    if (added > 0) publishStat(this.views.stats, 'hashesPublished', this.hashes);
    return added > 0;
  }
}
