// Plain-text tables for the terminal: right-aligned numbers, a title line, no
// colours (the output is also read from CI logs).

export type Cell = string | number;

export function formatNumber(x: number, digits = 3): string {
  if (!Number.isFinite(x)) return String(x);
  const abs = Math.abs(x);
  if (abs !== 0 && (abs >= 1e7 || abs < 1e-3)) return x.toExponential(2);
  if (Number.isInteger(x)) return x.toLocaleString('en-US');
  return x.toLocaleString('en-US', { maximumSignificantDigits: Math.max(digits, 1) + 1 });
}

function renderTable(title: string, rows: readonly Record<string, Cell>[]): string {
  if (rows.length === 0) return `${title}\n  (no rows)\n`;
  const columns = Object.keys(rows[0]!);
  const text = rows.map((r) =>
    columns.map((c) => {
      const v = r[c];
      return typeof v === 'number' ? formatNumber(v) : (v ?? '');
    }),
  );
  const widths = columns.map((c, i) => Math.max(c.length, ...text.map((t) => t[i]!.length)));
  const numeric = columns.map((c) => rows.every((r) => typeof r[c] === 'number'));
  const line = (cells: string[]) =>
    '  ' +
    cells.map((s, i) => (numeric[i] ? s.padStart(widths[i]!) : s.padEnd(widths[i]!))).join('  ');
  return [
    title,
    line(columns),
    '  ' + widths.map((w) => '-'.repeat(w)).join('  '),
    ...text.map(line),
    '',
  ].join('\n');
}

export function printTable(title: string, rows: readonly Record<string, Cell>[]): void {
  process.stdout.write(renderTable(title, rows) + '\n');
}
