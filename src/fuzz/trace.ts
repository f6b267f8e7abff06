// The trace of one schedule: a running FNV-1a hash of every step taken (always
// kept: the same seed must give the same hash) and, when asked, a readable
// line per step for failure reports and regression tests.

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

export class TraceHash {
  private h = FNV_OFFSET;

  add(word: number): void {
    let h = this.h;
    let w = word | 0;
    for (let i = 0; i < 4; i += 1) {
      h = Math.imul(h ^ (w & 0xff), FNV_PRIME);
      w >>>= 8;
    }
    this.h = h;
  }

  /** 8 hex digits. */
  hex(): string {
    return (this.h >>> 0).toString(16).padStart(8, '0');
  }
}

export interface TraceLine {
  /** Decision index at which the step ran. */
  readonly decision: number;
  readonly actor: string;
  /** Steps run inside a store-planning pass (between its snapshot and its confirmation). */
  readonly nested: boolean;
  readonly text: string;
}

export function formatTrace(lines: readonly TraceLine[]): string {
  return lines
    .map(
      (l) =>
        `${String(l.decision).padStart(4)} ${l.nested ? '  > ' : ''}${l.actor.padEnd(9)} ${l.text}`,
    )
    .join('\n');
}
