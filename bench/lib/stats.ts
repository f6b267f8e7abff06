// Medians and spreads. Every figure in the results file is a Figure: the
// median of its samples plus how far they spread, so a reader can tell a real
// difference from noise on a shared machine.

interface Spread {
  readonly min: number;
  readonly p25: number;
  readonly p75: number;
  readonly max: number;
  /** Median absolute deviation (unscaled). */
  readonly mad: number;
}

export interface Figure {
  readonly median: number;
  readonly unit: string;
  readonly samples: number;
  readonly spread: Spread;
}

/** Linear interpolation between order statistics; `sorted` ascending, q in [0, 1]. */
export function quantile(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  const at = (n - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.min(n - 1, lo + 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo);
}

export function sortedCopy(samples: ArrayLike<number>): Float64Array {
  return Float64Array.from(samples).sort();
}

export function median(samples: ArrayLike<number>): number {
  return quantile(sortedCopy(samples), 0.5);
}

export function figure(samples: ArrayLike<number>, unit: string): Figure {
  const sorted = sortedCopy(samples);
  const med = quantile(sorted, 0.5);
  const deviations = sortedCopy(Array.from(sorted, (x) => Math.abs(x - med)));
  return {
    median: med,
    unit,
    samples: sorted.length,
    spread: {
      min: sorted.length ? sorted[0]! : Number.NaN,
      p25: quantile(sorted, 0.25),
      p75: quantile(sorted, 0.75),
      max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN,
      mad: quantile(deviations, 0.5),
    },
  };
}

/** A figure of one ratio per paired sample (e.g. design a / design b in the same repeat). */
export function ratioFigure(numerators: number[], denominators: number[]): Figure {
  const ratios = numerators.map((x, i) => x / denominators[i]!);
  return figure(ratios, 'ratio');
}
