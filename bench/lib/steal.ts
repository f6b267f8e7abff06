// Hypervisor steal: the share of CPU time the virtual machine's CPUs were
// runnable but not running, because the host ran something else. On a shared
// VM this stops any thread for milliseconds at random, whatever it is doing,
// so a latency tail can be the host's and not the design's. Linux only: the
// `steal` column of /proc/stat's first line; elsewhere NaN.
import { readFileSync } from 'node:fs';

/** Jiffies so far: steal and the total of every column. */
export interface CpuJiffies {
  readonly steal: number;
  readonly total: number;
}

export function cpuJiffies(): CpuJiffies | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    const fields = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal [guest guest_nice], the last two inside user.
    if (fields.length < 8 || fields.some((v) => !Number.isFinite(v))) return undefined;
    const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
    return { steal: fields[7]!, total };
  } catch {
    return undefined;
  }
}

/** The share of CPU time stolen between two readings (NaN when either is missing or nothing elapsed). */
export function stealShare(from: CpuJiffies | undefined, to: CpuJiffies | undefined): number {
  if (from === undefined || to === undefined || to.total <= from.total) return Number.NaN;
  return (to.steal - from.steal) / (to.total - from.total);
}
