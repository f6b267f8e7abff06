// The roles world's scheduler decisions, by the engine model's policy
// (src/runtime/schedule-policy.ts, the one engine-schedule.ts follows): a
// step's pass over the requests in the engine's order — running requests
// oldest first (each takes the step that fits the pool, after preempting the
// policy's victim when short, or preempts itself, or is ended when alone it
// cannot make one step), then preempted ones oldest first by admission (with
// the watermark kept free), then admissions in arrival order (first chunk and
// watermark). The engine plans a whole step at once; here the pass is spread
// over fuzz decisions, one request's action each, so the other roles can
// interleave between any two of them. What the pass reads of the pool is the
// engine's own count (blocks held by requests, a preempted one's counted free
// at once, an ending one's until the allocator freed them); blocks the count
// says are free but the pool cannot supply yet (quarantined behind a copy, or
// a preempted request's before the allocator cleared them) hold the pass on
// that request, as the engine's step waits for its allocation's answer; a
// preempted request's turn holds the pass until its own blocks are cleared
// (the engine clears them at the preemption), so nothing new is admitted
// before it resumed or was found to wait for room.
// The scenario's scripted preemptions and aborts come on top, at the
// request's turn (adversarial injections: world-engine.ts). The engine's step
// token budget and running cap have no counterpart here: the scenario's batch
// sizes and slot count stand for them.
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
  tokensThatFit,
  watermarkBlocks,
} from '../runtime/schedule-policy.js';
import { A_ABORT, A_DECODE, A_FINISH, A_OPEN, A_PREEMPT, A_PREFILL, A_RELEASE } from './request.js';
import type { WorldRequest } from './request.js';

/** One scheduler decision: a request's action. */
export interface SchedulerChoice {
  /** The request whose turn it is (a victim's preemption is taken on its behalf). */
  readonly r: WorldRequest;
  readonly action: number;
  /** Tokens of a prefill, decode or resumption, fitted to the pool. */
  readonly tokens: number;
  /** A preemption by the policy: the request preempted (r itself, or the victim making room for r). */
  readonly victim?: WorldRequest;
  /** An end by the policy: why (it can never fit the pool). */
  readonly reason?: string;
}

/** What the pass reads of the engine around it. */
export interface SchedulePassView {
  readonly gpuBlocks: number;
  readonly requests: readonly WorldRequest[];
  freeSlots(): number;
  /** New blocks `r` needs for `tokens` more tokens past what it computed and scheduled. */
  blocksFor(r: WorldRequest, tokens: number): number;
  /** The pool can hand `r` the blocks for `tokens` more tokens now. */
  canSupply(r: WorldRequest, tokens: number): boolean;
}

type Section = 'running' | 'preempted' | 'admit' | 'over';
/**
 * An item's outcome: a decision, move past it, the pass went on to another
 * section, or hold the pass on it (nothing to do now).
 */
type Turn = SchedulerChoice | 'next' | 'moved' | 'hold';

export class SchedulePass {
  private section: Section = 'over';
  private list: WorldRequest[] = [];
  private at = 0;
  /** Running requests served earlier in this pass (they outrank the ones after). */
  private older = 0;
  /** A preempted request waits for room: nothing new is admitted in this pass. */
  private waiting = false;
  /** Blocks the admissions of this pass counted for their first chunks. */
  private admitBlocks = 0;

  constructor(private readonly v: SchedulePassView) {}

  /** The next decision, or undefined when the scheduler has nothing to do now (idempotent). */
  next(): SchedulerChoice | undefined {
    for (const r of this.v.requests) {
      if (r.phase === 'ending' && r.freed) return { r, action: A_RELEASE, tokens: 0 };
    }
    // The rest of this pass, else one fresh pass (a request skipped may go now).
    if (this.section !== 'over') {
      const c = this.walk();
      if (c !== 'over') return c;
    }
    this.begin();
    const c = this.walk();
    if (c !== 'over') return c;
    return undefined;
  }

  /** The decision `c` was carried out: the pass moves on. */
  taken(c: SchedulerChoice): void {
    if (c.action === A_RELEASE) return;
    if (this.section === 'running') {
      if (c.victim !== undefined && c.victim !== c.r) return; // r's turn goes on
      if (c.victim === c.r || c.reason !== undefined) return this.enter('preempted');
      if (c.action === A_PREFILL || c.action === A_DECODE) this.older += 1;
    } else if (this.section === 'admit' && c.action === A_OPEN) {
      const alone = this.heldBlocks() === 0 && this.admitBlocks === 0;
      this.admitBlocks += admissionBlocks(
        this.v.blocksFor(c.r, firstChunk(c.r)),
        watermarkBlocks(this.v.gpuBlocks),
        alone,
      );
      return; // the next admission is drawn afresh
    }
    this.at += 1;
  }

  private begin(): void {
    this.older = 0;
    this.waiting = false;
    this.admitBlocks = 0;
    this.enter('running');
  }

  private enter(section: Section): void {
    this.section = section;
    this.at = 0;
    const rs = this.v.requests;
    if (section === 'running') this.list = rs.filter((r) => r.phase === 'running').sort(byRunOrder);
    else if (section === 'preempted') {
      this.list = rs.filter((r) => r.phase === 'preempted').sort(byAdmissionOrder);
    } else this.list = [];
  }

  /** Walks the pass from where it is to the next decision, a hold, or its end. */
  private walk(): SchedulerChoice | undefined | 'over' {
    for (;;) {
      if (this.section === 'over') return 'over';
      if (this.section === 'admit') {
        const c = this.admission();
        if (c !== undefined) return c;
        this.section = 'over';
        continue;
      }
      if (this.at >= this.list.length) {
        this.enter(this.section === 'running' ? 'preempted' : 'admit');
        continue;
      }
      const r = this.list[this.at]!;
      const turn = this.section === 'running' ? this.runningTurn(r) : this.resumeTurn(r);
      if (turn === 'hold') return undefined;
      if (turn === 'next') this.at += 1;
      else if (turn !== 'moved') return turn;
    }
  }

  /** The engine's count of held blocks (a preempted request's are free at once). */
  private heldBlocks(): number {
    let n = 0;
    for (const r of this.v.requests) n += r.held;
    return n;
  }

  private freeBlocks(): number {
    return this.v.gpuBlocks - 1 - this.heldBlocks();
  }

  /** A running request's turn: an injected fault, its finish, or a step fitted to the pool. */
  private runningTurn(r: WorldRequest): Turn {
    if (r.phase !== 'running') return 'next'; // preempted earlier in this pass
    if (r.abortAt !== undefined && r.steps >= r.abortAt) return { r, action: A_ABORT, tokens: 0 };
    if (r.preemptAt.length > 0 && r.preemptAt[0]! <= r.steps && r.steps > 0) {
      return { r, action: A_PREEMPT, tokens: 0 };
    }
    const prefill = r.computed + r.scheduled < r.numTokens;
    if (!prefill && r.decoded >= r.spec.decode.length) return { r, action: A_FINISH, tokens: 0 };
    const action = prefill ? A_PREFILL : A_DECODE;
    const want = tokensFor(r);
    const short = this.v.blocksFor(r, want) > this.freeBlocks();
    if (short) {
      const victim = preemptionVictim(this.v.requests, r);
      if (victim !== undefined) return { r, action: A_PREEMPT, tokens: 0, victim };
    }
    if (mustPreemptItself(short, this.older, r.held)) {
      return { r, action: A_PREEMPT, tokens: 0, victim: r };
    }
    const n = tokensThatFit(want, this.freeBlocks(), (t) => this.v.blocksFor(r, t));
    if (n === 0) {
      if (mustEndTooBig(n, this.heldBlocks() === r.held)) {
        return { r, action: A_ABORT, tokens: 0, reason: this.poolReason(r) };
      }
      // Older requests or ending ones hold the rest: it waits, and so do the newer ones.
      this.enter('preempted');
      return 'moved';
    }
    return this.v.canSupply(r, n) ? { r, action, tokens: n } : 'hold';
  }

  /**
   * A preempted request's turn: it resumes from zero when there is room (the
   * pass holds on it until the allocator cleared its blocks), or it waits and
   * nothing new is admitted.
   */
  private resumeTurn(r: WorldRequest): Turn {
    if (r.phase !== 'preempted') return 'next';
    const alone = this.heldBlocks() === 0;
    const room = resumeRoom(this.freeBlocks(), watermarkBlocks(this.v.gpuBlocks), alone);
    const n = tokensThatFit(tokensFor(r), room, (t) => this.v.blocksFor(r, t));
    if (mustEndTooBig(n, alone)) {
      return { r, action: A_ABORT, tokens: 0, reason: this.poolReason(r) };
    }
    if (n === 0) {
      this.waiting = true;
      this.enter('admit');
      return 'moved';
    }
    return this.v.canSupply(r, n) ? { r, action: A_PREFILL, tokens: n } : 'hold';
  }

  /** The next admission in arrival order: a slot, and room for its first chunk (and the watermark). */
  private admission(): SchedulerChoice | undefined {
    if (this.waiting || this.v.freeSlots() === 0) return undefined;
    const r = nextInArrivalOrder(this.v.requests, (q) => q.phase === 'queued');
    if (r === undefined) return undefined;
    const alone = this.heldBlocks() === 0 && this.admitBlocks === 0;
    const need = admissionBlocks(
      this.v.blocksFor(r, firstChunk(r)),
      watermarkBlocks(this.v.gpuBlocks),
      alone,
    );
    if (!mayAdmit(need, this.freeBlocks() - this.admitBlocks, alone)) return undefined;
    return { r, action: A_OPEN, tokens: 0 };
  }

  private poolReason(r: WorldRequest): string {
    return (
      `gpu-pool: needs ${r.held + this.v.blocksFor(r, 1)} GPU blocks to compute token ` +
      `${r.computed + r.scheduled + 1}; the pool has ${this.v.gpuBlocks - 1}`
    );
  }
}

/** Tokens a request's next step wants: the scenario's prefill batch, or a decode token and its drafts. */
function tokensFor(r: WorldRequest): number {
  const c = r.computed + r.scheduled;
  return c < r.numTokens ? Math.min(r.spec.batchTokens, r.numTokens - c) : 1 + r.spec.drafts;
}

/** The first prefill chunk of a request not yet opened. */
function firstChunk(r: WorldRequest): number {
  return Math.min(r.spec.batchTokens, r.spec.prompt.length);
}
