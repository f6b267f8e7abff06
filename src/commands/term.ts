// Terminal conventions shared by the commands: colour only on a TTY and only
// without NO_COLOR (https://no-color.org: any non-empty value), progress as a
// bar on a TTY and as plain periodic lines otherwise.
import { SingleBar } from 'cli-progress';

export interface OutStream {
  isTTY?: boolean;
  write(s: string): boolean;
}

export function colorAllowed(
  stream: OutStream,
  env: Record<string, string | undefined> = process.env,
): boolean {
  return stream.isTTY === true && !env.NO_COLOR;
}

export type Paint = (s: string) => string;

/** Colour functions that are the identity when colour is not allowed. */
export function painter(enabled: boolean): { green: Paint; red: Paint; bold: Paint; dim: Paint } {
  const sgr =
    (open: number, close: number): Paint =>
    (s) =>
      enabled ? `\u001b[${open}m${s}\u001b[${close}m` : s;
  return { green: sgr(32, 39), red: sgr(31, 39), bold: sgr(1, 22), dim: sgr(2, 22) };
}

/** Formats label/value rows as two aligned columns. */
export function table(rows: ReadonlyArray<readonly [string, string]>): string {
  const width = Math.max(0, ...rows.map(([l]) => l.length));
  return rows.map(([l, v]) => `  ${l.padEnd(width)}  ${v}`).join('\n');
}

export interface Progress {
  update(done: number, detail: string): void;
  stop(): void;
}

/** Plain lines at most every this often when the stream is not a TTY. */
export const PLAIN_PROGRESS_MS = 5000;

/**
 * A bar (cli-progress) on a TTY; on anything else one plain line every
 * PLAIN_PROGRESS_MS; nothing when `quiet`.
 */
export function progress(
  stream: OutStream & NodeJS.WritableStream,
  total: number,
  label: string,
  options: { quiet?: boolean; color?: boolean } = {},
): Progress {
  if (options.quiet) return { update() {}, stop() {} };
  if (stream.isTTY) {
    const bar = new SingleBar({
      stream,
      format: `${label} [{bar}] {value}/{total} {detail}`,
      barCompleteChar: '#',
      barIncompleteChar: '-',
      hideCursor: true,
      clearOnComplete: false,
      // cli-progress colours nothing itself with this format; keep it plain anyway.
      formatValue: (v) => String(v),
    });
    bar.start(total, 0, { detail: '' });
    return {
      update(done, detail) {
        bar.update(done, { detail });
      },
      stop() {
        bar.stop();
      },
    };
  }
  // The first line comes after one interval: a short run prints none.
  let last = Date.now();
  let lastDone = -1;
  return {
    update(done, detail) {
      const now = Date.now();
      if (now - last < PLAIN_PROGRESS_MS || done === lastDone) return;
      last = now;
      lastDone = done;
      stream.write(`${label}: ${done}/${total} ${detail}\n`);
    },
    stop() {},
  };
}

/** "1 chunk", "2 chunks"; "1 entry", "2 entries" with the plural given. */
export function count(n: number, noun: string, plural = `${noun}s`): string {
  return `${n} ${n === 1 ? noun : plural}`;
}
