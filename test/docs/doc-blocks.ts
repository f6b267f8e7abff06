// Reading the fenced blocks of the project's Markdown (README.md, docs/*.md)
// and the rules docs/contributing.md states for them, as pure functions, so
// test/docs/docs.test.ts only runs things and the rules themselves are unit-tested.

/** Languages whose blocks are complete programs: they are run. */
export const RUN_LANGS = ['ts', 'typescript', 'js', 'javascript', 'mjs'] as const;
/** Languages whose blocks are shell: their kvoff options and npm scripts are checked. */
export const SHELL_LANGS = ['sh', 'bash', 'shell'] as const;

type Directive =
  | { readonly kind: 'include'; readonly path: string }
  | { readonly kind: 'output'; readonly command: string }
  | { readonly kind: 'output-lines'; readonly command: string }
  | { readonly kind: 'output-json'; readonly command: string }
  | { readonly kind: 'illustration' };

export interface Block {
  /** Markdown file the block is in, as given to parseBlocks. */
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly lang: string;
  readonly body: string;
  /** The `<!-- ... -->` comment on the nearest non-blank line above the fence, parsed. */
  readonly directive: Directive | undefined;
  /** 1-based lines of the body (first, last, inclusive; last = first - 1 when empty), for rewriting. */
  readonly bodyLines: readonly [number, number];
}

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/;
const COMMENT = /^\s*<!--\s*([a-z-]+)\s*(?::\s*(.*?))?\s*-->\s*$/;

function parseDirective(text: string): Directive | undefined {
  const m = COMMENT.exec(text);
  if (!m) return undefined;
  const kind = m[1];
  const arg = (m[2] ?? '').trim();
  switch (kind) {
    case 'include':
    case 'output':
    case 'output-lines':
    case 'output-json':
      if (arg === '') throw new Error(`<!-- ${kind}: ... --> needs an argument`);
      return kind === 'include' ? { kind, path: arg } : { kind, command: arg };
    case 'illustration':
      return { kind };
    default:
      return undefined;
  }
}

export function parseBlocks(file: string, markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i] ?? '');
    if (!open) continue;
    const fence = open[2] ?? '```';
    const lang = (open[3] ?? '').toLowerCase();
    let end = i + 1;
    while (end < lines.length && !(lines[end] ?? '').trim().startsWith(fence)) end++;
    if (end >= lines.length) throw new Error(`${file}:${i + 1}: fence never closed`);
    let above = i - 1;
    while (above >= 0 && (lines[above] ?? '').trim() === '') above--;
    const directive = above >= 0 ? parseDirective(lines[above] ?? '') : undefined;
    blocks.push({
      file,
      line: i + 1,
      lang,
      body: lines.slice(i + 1, end).join('\n'),
      directive,
      bodyLines: [i + 2, end],
    });
    i = end;
  }
  return blocks;
}

/** Replaces a block's body (for KVOFF_DOCS_UPDATE=1); returns the new Markdown. */
export function replaceBody(markdown: string, block: Block, body: string): string {
  const lines = markdown.split('\n');
  const [first, last] = block.bodyLines;
  lines.splice(first - 1, last - first + 1, ...body.split('\n'));
  return lines.join('\n');
}

/** Output as compared: no colour codes, no trailing spaces, no blank lines before or after. */
export function normalizeOutput(text: string): string {
  return (
    text
      // eslint-disable-next-line no-control-regex
      .replace(/\x1b\[[0-9;]*m/g, '')
      .split('\n')
      .map((l) => l.trimEnd())
      .join('\n')
      .replace(/^\n+/, '')
      .replace(/\n+$/, '')
  );
}

/** output-lines: every line of the sample appears in the output, in order. Returns the first missing line. */
export function missingExcerptLine(sample: string, output: string): string | undefined {
  const out = normalizeOutput(output).split('\n');
  let at = 0;
  for (const line of normalizeOutput(sample).split('\n')) {
    if (line.trim() === '') continue;
    while (at < out.length && out[at] !== line) at++;
    if (at >= out.length) return line;
    at++;
  }
  return undefined;
}

/**
 * output-json: every field of the sample exists in the actual value with the
 * same JSON type, recursively (the first element of a sample array against
 * every element of the actual one). Returns the paths that differ.
 */
export function jsonShapeDiff(sample: unknown, actual: unknown, path = '$'): string[] {
  const type = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
  if (type(sample) !== type(actual)) {
    return [`${path}: sample is ${type(sample)}, output is ${type(actual)}`];
  }
  if (Array.isArray(sample) && Array.isArray(actual)) {
    const [first] = sample as unknown[];
    if (first === undefined) return [];
    return (actual as unknown[]).flatMap((v, i) => jsonShapeDiff(first, v, `${path}[${i}]`));
  }
  if (type(sample) === 'object') {
    const a = actual as Record<string, unknown>;
    return Object.entries(sample as Record<string, unknown>).flatMap(([k, v]) =>
      k in a ? jsonShapeDiff(v, a[k], `${path}.${k}`) : [`${path}.${k}: missing in the output`],
    );
  }
  return [];
}

/** A kvoff invocation found in a shell line: the subcommand (or '' for none) and its long options. */
export interface KvoffCall {
  readonly sub: string;
  readonly options: readonly string[];
}

const KVOFF_CALL =
  /(?:^|[\s(])(?:npx\s+kvoff|kvoff|src\/cli\.ts|dist\/src\/cli\.js)(?=\s|$)((?:\s+[^\s|;&#]+)*)/g;

/** kvoff calls in one shell line (comments, pipes and `&&` end a call). */
export function kvoffCalls(line: string): KvoffCall[] {
  const code = line.replace(/(^|\s)#.*$/, '');
  const calls: KvoffCall[] = [];
  for (const m of code.matchAll(KVOFF_CALL)) {
    const words = (m[1] ?? '').trim().split(/\s+/).filter(Boolean);
    const sub = words[0] !== undefined && !words[0].startsWith('-') ? words[0] : '';
    const options = words.filter((w) => /^--[a-z]/.test(w)).map((w) => w.replace(/=.*$/, ''));
    calls.push({ sub, options });
  }
  return calls;
}

/** npm scripts named in one shell line (`npm run x`, `npm start`, `npm test`). */
export function npmScripts(line: string): string[] {
  const code = line.replace(/(^|\s)#.*$/, '');
  const names: string[] = [];
  for (const m of code.matchAll(/\bnpm\s+(?:run(?:-script)?\s+([^\s;&|]+)|(start|test)\b)/g)) {
    names.push(m[1] ?? m[2] ?? '');
  }
  return names;
}

/** Long options listed in a commander --help text. */
export function helpOptions(help: string): Set<string> {
  return new Set([...help.matchAll(/(?:^|[\s,])(--[a-z][a-z0-9-]*)/gm)].map((m) => m[1] ?? ''));
}

/** Relative link targets in Markdown (`[x](path)`), without fragments; URLs and anchors skipped. */
export function relativeLinks(markdown: string): string[] {
  const targets: string[] = [];
  for (const m of markdown.matchAll(/\]\(([^)\s]+)\)/g)) {
    const t = m[1] ?? '';
    if (/^[a-z]+:/i.test(t) || t.startsWith('#')) continue;
    targets.push(t.replace(/#.*$/, ''));
  }
  return targets;
}

/** Words as `wc -w` counts them (runs of non-space). */
export function wordCount(text: string): number {
  return text.split(/\s+/).filter(Boolean).length;
}

/** Splits a documented command into argv for `node dist/src/cli.js`; `2>&1` adds stderr. */
export function commandArgv(command: string): { argv: string[]; withStderr: boolean } {
  let rest = command.trim();
  const withStderr = /\s2>&1$/.test(rest);
  if (withStderr) rest = rest.replace(/\s2>&1$/, '');
  const words = rest.split(/\s+/);
  if (words[0] === 'npx') words.shift();
  if (words[0] !== 'kvoff') throw new Error(`a sample command must start with kvoff: ${command}`);
  return { argv: words.slice(1), withStderr };
}
