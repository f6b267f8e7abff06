// A level below host memory that fails mid-run degrades the run, never stops
// it; but it must not do so in silence. The watch reads the tiers' state from
// the runtime's stats and writes one line on stderr when a level becomes
// degraded (with why), again at most once per WARN_EVERY_MS while it stays so
// (with what it cost since), and once when it recovers. `kvoff simulate` and
// `kvoff serve` run one; a level that could not be used at start under
// --tier-optional is its first warning.
import type { LowerTierName } from '../tier/lower.js';
import type { LowerTierReport, PerTierCounters } from '../tier/tier-stats.js';

/** A degraded level is reported again at most this often. */
const WARN_EVERY_MS = 30_000;
/** How often the stats are read. */
const POLL_MS = 500;

/** A degraded level's reason comes by message, its state by shared memory: wait this long for the reason. */
const REASON_WAIT_MS = 1_000;

interface Seen {
  degraded: boolean;
  degradedSinceMs: number;
  warnedAtMs: number;
  warned: boolean;
  at: LowerTierReport;
}

const LEVELS: readonly LowerTierName[] = ['disk', 'redis'];

export class TierWatch {
  private timer: NodeJS.Timeout | undefined;
  private readonly seen = new Map<LowerTierName, Seen>();

  constructor(
    private readonly tiers: () => PerTierCounters,
    private readonly write: (line: string) => void,
    private readonly everyMs = WARN_EVERY_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Reads the stats every POLL_MS until stop() (the timer never keeps the process alive). */
  start(): this {
    this.timer ??= setInterval(() => this.check(), POLL_MS).unref();
    this.check();
    return this;
  }

  /** A last look, then no more. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.check();
  }

  check(): void {
    const tiers = this.tiers();
    const now = this.now();
    for (const name of LEVELS) {
      const t = tiers[name];
      if (t.state === 'off') continue;
      const degraded = t.state === 'degraded';
      const s = this.seen.get(name) ?? {
        degraded: false,
        degradedSinceMs: now,
        warnedAtMs: -Infinity,
        warned: false,
        at: t,
      };
      if (degraded && !s.degraded) s.degradedSinceMs = now;
      const reasonDue = t.problem !== undefined || now - s.degradedSinceMs >= REASON_WAIT_MS;
      if (degraded && reasonDue && now - s.warnedAtMs >= this.everyMs) {
        this.write(warning(name, t, s.warned ? s.at : undefined));
        s.warnedAtMs = now;
        s.warned = true;
        s.at = t;
      } else if (!degraded && s.degraded && s.warned) {
        this.write(`kvoff: ${name} tier recovered`);
        s.warned = false;
        s.warnedAtMs = -Infinity;
      }
      s.degraded = degraded;
      this.seen.set(name, s);
    }
  }
}

function warning(
  name: LowerTierName,
  t: LowerTierReport,
  since: LowerTierReport | undefined,
): string {
  const why = t.problem ?? (t.circuitOpen ? 'circuit open' : 'failing');
  const d = (f: 'droppedChunks' | 'errors' | 'timeouts') => t[f] - (since?.[f] ?? 0);
  const cost = `${d('droppedChunks')} stores dropped, ${d('errors')} errors, ${d('timeouts')} timeouts ${since ? 'since the last warning' : 'so far'}`;
  return (
    `kvoff: warning: ${name} tier degraded: ${why} (${cost}); ` +
    'the run goes on without it: stores are dropped and lookups miss until it recovers'
  );
}

/** The warning printed at start when the Redis tier runs without a secret. */
export const INSECURE_TIER_WARNING =
  'kvoff: warning: --insecure-tier: Redis entries are not authenticated; ' +
  'anyone who can write to the cluster can change the KV that engines load';
