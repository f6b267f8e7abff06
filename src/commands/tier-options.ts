// `--disk DIR`, `--disk-bytes N` and `--redis URL[,URL...]`: the levels below
// host memory, shared by `kvoff simulate` and `kvoff serve`. Without them the
// runtime is host-only (the default). `--model NAME`, `--model-revision REV`
// and `--adapter NAME`: whose KV it is (the namespace every key and every
// lower-tier entry is derived under); the built-in engine simulator is a
// model of its own, so without them its entries are still named.
import type { Command } from 'commander';
import { ConfigError, InvalidArgumentError, quoted } from '../errors.js';
import { resolveNamespace } from '../identity.js';
import type { NamespaceInput } from '../identity.js';
import { DISK_BYTES_DEFAULT } from '../tier/cascade.js';
import type { TiersOptions } from '../tier/cascade.js';
import { intOption } from './options.js';

export interface TierRawOptions {
  disk?: string;
  diskBytes?: string;
  redis?: string;
  model?: string;
  modelRevision?: string;
  adapter?: string;
}

/** The model name of kvoff's built-in engine simulator: the CLI's namespace without --model. */
export const SIMULATED_MODEL = 'kvoff-simulated-engine';

export function addTierOptions(cmd: Command): Command {
  return cmd
    .option('--disk <dir>', 'disk tier below host memory: one file per chunk, survives restarts')
    .option('--disk-bytes <n>', `byte cap of the disk tier (default ${DISK_BYTES_DEFAULT})`)
    .option(
      '--redis <urls>',
      'Redis Cluster tier shared by instances: seed node URLs, comma-separated (redis://127.0.0.1:7100)',
    )
    .option(
      '--model <name>',
      `the model whose KV this is: every key and tier entry is derived under it (default ${SIMULATED_MODEL})`,
    )
    .option('--model-revision <rev>', 'the model revision (weights), part of the namespace')
    .option('--adapter <name>', 'the LoRA adapter, part of the namespace');
}

/** The namespace the options name: --model (default the simulator's own), --model-revision, --adapter. */
export function parseNamespaceOptions(raw: TierRawOptions): NamespaceInput {
  const ns: NamespaceInput = { model: raw.model ?? SIMULATED_MODEL };
  if (raw.modelRevision !== undefined) ns.revision = raw.modelRevision;
  if (raw.adapter !== undefined) ns.adapter = raw.adapter;
  try {
    resolveNamespace(ns);
  } catch (err) {
    // Blame the option, not the config field.
    if (!(err instanceof ConfigError)) throw err;
    const option = { 'namespace.model': '--model', 'namespace.revision': '--model-revision' }[
      err.field
    ];
    throw new InvalidArgumentError(option ?? '--adapter', err.rule);
  }
  return ns;
}

/** The tiers the options name, or undefined (host only). */
export function parseTierOptions(raw: TierRawOptions): TiersOptions | undefined {
  const tiers: TiersOptions = {};
  if (raw.diskBytes !== undefined && raw.disk === undefined) {
    throw new InvalidArgumentError('--disk-bytes', 'needs --disk DIR');
  }
  if (raw.disk !== undefined) {
    if (raw.disk.trim() === '') throw new InvalidArgumentError('--disk', 'needs a directory');
    const bytesMax = intOption('--disk-bytes', raw.diskBytes, 1, Number.MAX_SAFE_INTEGER);
    tiers.disk = { dir: raw.disk, ...(bytesMax !== undefined ? { bytesMax } : {}) };
  }
  if (raw.redis !== undefined) {
    const urls = raw.redis
      .split(',')
      .map((u) => u.trim())
      .filter((u) => u !== '');
    if (urls.length === 0) throw new InvalidArgumentError('--redis', 'needs at least one URL');
    for (const url of urls) {
      if (!/^rediss?:\/\/[^/\s]+/.test(url)) {
        throw new InvalidArgumentError('--redis', `${quoted(url)} is not a redis:// URL`);
      }
    }
    tiers.redis = { urls };
  }
  return tiers.disk || tiers.redis ? tiers : undefined;
}
