// The lookup record on the storeRequest ring, built by whoever plays the
// scheduler (the engine simulator, an external host) and read by the store
// role: [LOOKUP, tag, numTokens, force, keys of group 0, keys of group 1, ...],
// each key as two words. A group's key count follows from numTokens, so both
// sides derive it the same way (lookupKeyCount) and the record carries none.
import type { Config } from '../config.js';
import { invariant } from '../errors.js';
import { OP_LOOKUP } from './protocol.js';
import { pushKey, readKey } from './rings.js';

/** Keys a lookup of `numTokens` carries for a group: one per whole chunk (vLLM queries them all). */
export function lookupKeyCount(config: Config, group: number, numTokens: number): number {
  return Math.min(
    Math.floor(numTokens / config.groups[group]!.tokensPerChunk),
    config.maxChunksPerRequest,
  );
}

/**
 * The prompt tokens a lookup may cover so that its record, and the load
 * record of any hit it answers, fit in a ring record of `recordWordsMax`
 * words. A longer prompt is looked up as its prefix of that many whole chunks
 * (plus one token, so no chunk is lost to the recomputed last token).
 */
export function lookupTokensThatFit(
  config: Config,
  promptTokens: number,
  recordWordsMax: number,
): number {
  const groups = config.groups.length;
  const chunks = Math.min(
    Math.floor((recordWordsMax - 4) / (2 * groups)),
    Math.floor((recordWordsMax - 2) / (config.blocksPerChunk * groups)),
  );
  if (chunks < 1) return 0;
  const tpc = Math.max(...config.groups.map((g) => g.tokensPerChunk));
  return Math.min(promptTokens, chunks * tpc + 1);
}

/**
 * `force`: the request was deferred for too long; pending entries now count
 * as what they are right now (being written: miss; being read: hit).
 */
export function encodeLookup(
  config: Config,
  tag: number,
  numTokens: number,
  force: boolean,
  keyOf: (group: number, chunk: number) => bigint,
): number[] {
  const record = [OP_LOOKUP, tag, numTokens, force ? 1 : 0];
  for (let g = 0; g < config.groups.length; g += 1) {
    const n = lookupKeyCount(config, g, numTokens);
    for (let c = 0; c < n; c += 1) pushKey(record, keyOf(g, c));
  }
  return record;
}

export interface DecodedLookup {
  tag: number;
  numTokens: number;
  force: boolean;
  keys: bigint[][];
}

export function decodeLookup(config: Config, r: Int32Array): DecodedLookup {
  invariant(r[0] === OP_LOOKUP, 'a lookup record');
  const numTokens = r[2]!;
  const keys: bigint[][] = [];
  let at = 4;
  for (let g = 0; g < config.groups.length; g += 1) {
    const n = lookupKeyCount(config, g, numTokens);
    const ks: bigint[] = [];
    for (let c = 0; c < n; c += 1, at += 2) ks.push(readKey(r, at));
    keys.push(ks);
  }
  invariant(at === r.length, `lookup record of ${r.length} words holds ${at}`);
  return { tag: r[1]!, numTokens, force: r[3] === 1, keys };
}
