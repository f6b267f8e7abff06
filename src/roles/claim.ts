// One writer per role, enforced: a role view claims its role's owner word
// (src/layout.ts OWNER_ROLES) with compareExchange right before its first
// write, and refuses every write once another view holds it or the runtime
// closed the memory. `check` only reads, so a call refused for its arguments
// claims nothing; `take` is called after validation, before the first write.
import { threadId } from 'node:worker_threads';
import { ClosedError, RoleClaimedError } from '../errors.js';
import { OWNER_CLOSED, OWNER_FREE } from '../layout.js';
import type { OwnedRole } from '../layout.js';
import type { SharedState } from '../state.js';

let viewsMade = 0;

/** A token unique to one view in this process: thread id and a per-thread count, never 0 or -1. */
function newToken(): number {
  viewsMade = (viewsMade + 1) & 0xffff;
  return (((threadId & 0x7fff) << 16) | viewsMade) + 1;
}

export class RoleClaim {
  private readonly control: Int32Array;
  private readonly word: number;
  private readonly token = newToken();

  /** `onClaim` runs once each time this view takes the role (e.g. to rebuild its private tables). */
  constructor(
    state: SharedState,
    readonly role: OwnedRole,
    private readonly onClaim: () => void = () => {},
  ) {
    this.control = state.control;
    this.word = state.ownerWord(role);
  }

  /** Throws ClosedError or RoleClaimedError unless this view may write; writes nothing. */
  check(): void {
    const owner = Atomics.load(this.control, this.word);
    if (owner !== this.token && owner !== OWNER_FREE) this.refuse(owner);
  }

  /** Holds the role for this view (once), or throws as `check` does. */
  take(): void {
    const owner = Atomics.load(this.control, this.word);
    if (owner === this.token) return;
    if (owner === OWNER_FREE) {
      const was = Atomics.compareExchange(this.control, this.word, OWNER_FREE, this.token);
      if (was === OWNER_FREE) {
        this.onClaim();
        return;
      }
      this.refuse(was);
    }
    this.refuse(owner);
  }

  /**
   * Gives the role up (if this view holds it) so another view, usually on
   * another thread, can take it: a hand-off after setup. Post the hand-off
   * to the next thread only after this returns.
   */
  handOff(): void {
    Atomics.compareExchange(this.control, this.word, this.token, OWNER_FREE);
  }

  private refuse(owner: number): never {
    if (owner === OWNER_CLOSED) throw new ClosedError(`the ${this.role} role's shared memory`);
    throw new RoleClaimedError(this.role);
  }
}

/** The runtime closed: every role view refuses from now on (ClosedError). */
export function closeRoles(state: SharedState, roles: readonly OwnedRole[]): void {
  for (const role of roles) Atomics.store(state.control, state.ownerWord(role), OWNER_CLOSED);
}
