// Request traces of Mooncake's shape (FAST'25, kvcache-ai/Mooncake,
// FAST25-release/traces/): one JSON object per line with the arrival time in
// milliseconds (`timestamp`), the prompt and output lengths (`input_length`,
// `output_length`) and `hash_ids`, one ID per 512-token block of the prompt
// (the last block usually partial). The IDs are prefix hashes, remapped to
// small integers: equal IDs at a position mean equal prompts up to the end of
// that block. Any trace of this shape from another source reads the same way;
// extra fields are ignored.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { InvalidArgumentError, TraceFormatError } from '../errors.js';

/** Tokens per hash block in Mooncake's traces. */
export const MOONCAKE_BLOCK_TOKENS = 512;

/** Largest prompt or output a trace line may give (a bound for every table sized from it). */
const TRACE_TOKENS_MAX = 1 << 22;

export interface TraceRequest {
  /** Arrival, in milliseconds from the start of the trace. */
  readonly timestampMs: number;
  readonly inputLength: number;
  readonly outputLength: number;
  /** One prefix-block ID per `blockTokens` tokens of the prompt (the last block may be partial). */
  readonly hashIds: readonly number[];
}

export interface Trace {
  /** Where it came from (a file's base name), for messages and results. */
  readonly source: string;
  readonly blockTokens: number;
  /** In arrival order (stable: requests of equal timestamps keep their file order). */
  readonly requests: readonly TraceRequest[];
}

export interface TraceReadOptions {
  /** Tokens per hash block; default 512 (Mooncake's). */
  blockTokens?: number;
  /** Name used in messages; default the file's base name, or "trace". */
  source?: string;
  /** Read only the first N requests of the file (after sorting by arrival); default all. */
  limit?: number;
}

/** Reads a trace file (JSONL); throws TraceFormatError naming the line on the first bad one. */
export function readTrace(path: string, options: TraceReadOptions = {}): Trace {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new InvalidArgumentError(
      '--trace',
      `cannot read ${path}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  return parseTrace(text, { source: basename(path), ...options });
}

/** Parses trace text (JSONL). Blank lines are skipped. */
export function parseTrace(text: string, options: TraceReadOptions = {}): Trace {
  const source = options.source ?? 'trace';
  const blockTokens = options.blockTokens ?? MOONCAKE_BLOCK_TOKENS;
  if (!Number.isInteger(blockTokens) || blockTokens < 1 || blockTokens > 1 << 20) {
    throw new InvalidArgumentError('blockTokens', 'must be an integer in [1, 1048576]');
  }
  const limit = options.limit ?? Infinity;
  if (limit !== Infinity && (!Number.isInteger(limit) || limit < 1)) {
    throw new InvalidArgumentError('limit', 'must be a positive integer');
  }
  const requests: TraceRequest[] = [];
  let lineNo = 0;
  for (const line of text.split('\n')) {
    lineNo += 1;
    if (line.trim() === '') continue;
    requests.push(parseLine(line, source, lineNo, blockTokens));
  }
  if (requests.length === 0) throw new TraceFormatError(source, 0, 'holds no request');
  // Arrival order; Array.prototype.sort is stable, so equal times keep file order.
  requests.sort((a, b) => a.timestampMs - b.timestampMs);
  return {
    source,
    blockTokens,
    requests: limit < requests.length ? requests.slice(0, limit) : requests,
  };
}

function parseLine(
  line: string,
  source: string,
  lineNo: number,
  blockTokens: number,
): TraceRequest {
  const fail = (rule: string) => new TraceFormatError(source, lineNo, rule);
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    throw fail('not a JSON object');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw fail('not a JSON object');
  const o = v as Record<string, unknown>;
  const timestamp = o.timestamp;
  if (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0) {
    throw fail('timestamp: must be a non-negative number of milliseconds');
  }
  const count = (name: string, min: number): number => {
    const x = o[name];
    if (typeof x !== 'number' || !Number.isInteger(x) || x < min || x > TRACE_TOKENS_MAX) {
      throw fail(`${name}: must be an integer in [${min}, ${TRACE_TOKENS_MAX}]`);
    }
    return x;
  };
  const inputLength = count('input_length', 1);
  const outputLength = count('output_length', 0);
  const ids = o.hash_ids;
  const want = Math.ceil(inputLength / blockTokens);
  if (!Array.isArray(ids) || ids.length !== want) {
    throw fail(
      `hash_ids: must hold ceil(input_length / ${blockTokens}) = ${want} IDs` +
        (Array.isArray(ids) ? `, holds ${ids.length}` : ''),
    );
  }
  for (let i = 0; i < ids.length; i += 1) {
    const id: unknown = ids[i];
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      throw fail(`hash_ids[${i}]: must be a non-negative integer`);
    }
  }
  return { timestampMs: timestamp, inputLength, outputLength, hashIds: ids as number[] };
}

/** The trace figures every replay reports (the JSON's `trace` object). */
export interface TraceFigures {
  requests: number;
  /** Prompt tokens over all requests. */
  promptTokens: number;
  /** Prompt tokens served from a tier instead of computed. */
  hitTokens: number;
  /** hitTokens / promptTokens. */
  tokenHitRatio: number;
}

export function traceFigures(
  requests: number,
  promptTokens: number,
  hitTokens: number,
): TraceFigures {
  return {
    requests,
    promptTokens,
    hitTokens,
    tokenHitRatio: promptTokens > 0 ? hitTokens / promptTokens : 0,
  };
}

/**
 * Refuses a chunk size that does not tile the trace's blocks: a chunk that
 * crossed a block boundary would have no block of its own to take its tokens
 * (and keys) from. `option` names what the caller sets the chunk with.
 */
export function checkTraceChunk(tokensPerChunk: number, blockTokens: number, option: string): void {
  if (blockTokens % tokensPerChunk === 0) return;
  const divisors: number[] = [];
  for (let d = 1; d <= blockTokens; d += 1) if (blockTokens % d === 0) divisors.push(d);
  throw new InvalidArgumentError(
    option,
    `a chunk of ${tokensPerChunk} tokens does not tile the trace's ${blockTokens}-token blocks; ` +
      `the chunk (tokens per block x blocks per chunk) must divide ${blockTokens}: one of ${divisors.join(', ')}`,
  );
}
