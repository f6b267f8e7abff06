// The levels below host memory, shared by `kvoff simulate` and `kvoff serve`:
// `--disk DIR`, `--redis URL[,URL...]` and how to reach and trust them.
// Without them the runtime is host-only (the default). `--model NAME`,
// `--model-revision REV` and `--adapter NAME`: whose KV it is (the namespace
// every key and every lower-tier entry is derived under); the built-in engine
// simulator is a model of its own, so without them its entries are still named.
//
// Secrets never come from argv (where `ps` shows them): the deployment secret
// from KVOFF_TIER_SECRET or --tier-secret-file, Redis credentials from the URL
// or from KVOFF_REDIS_USERNAME / KVOFF_REDIS_PASSWORD (the environment wins).
// No message built here shows one.
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { ConfigError, InvalidArgumentError } from '../errors.js';
import { resolveNamespace } from '../identity.js';
import type { NamespaceInput } from '../identity.js';
import { DISK_BYTES_DEFAULT } from '../tier/cascade.js';
import type { TiersOptions } from '../tier/cascade.js';
import { resolveRedisAccess } from '../tier/redis-access.js';
import { intOption } from './options.js';

export interface TierRawOptions {
  disk?: string;
  diskBytes?: string;
  redis?: string;
  redisCa?: string;
  redisCert?: string;
  redisKey?: string;
  tierSecretFile?: string;
  insecureTier?: boolean;
  tierOptional?: boolean;
  model?: string;
  modelRevision?: string;
  adapter?: string;
}

/** The environment variables the tier options read. */
const TIER_ENV = {
  secret: 'KVOFF_TIER_SECRET',
  redisUsername: 'KVOFF_REDIS_USERNAME',
  redisPassword: 'KVOFF_REDIS_PASSWORD',
} as const;

/** The model name of kvoff's built-in engine simulator: the CLI's namespace without --model. */
export const SIMULATED_MODEL = 'kvoff-simulated-engine';

export function addTierOptions(cmd: Command): Command {
  return cmd
    .option('--disk <dir>', 'disk tier below host memory: one file per chunk, survives restarts')
    .option('--disk-bytes <n>', `byte cap of the disk tier (default ${DISK_BYTES_DEFAULT})`)
    .option(
      '--redis <urls>',
      'Redis Cluster tier shared by instances: seed node URLs, comma-separated (redis://127.0.0.1:7100; rediss:// for TLS); credentials from KVOFF_REDIS_USERNAME/KVOFF_REDIS_PASSWORD',
    )
    .option('--redis-ca <file>', 'CA certificates (PEM) the Redis nodes must be signed by')
    .option('--redis-cert <file>', 'client certificate (PEM) for Redis nodes that require one')
    .option('--redis-key <file>', "the client certificate's private key (PEM)")
    .option(
      '--tier-secret-file <file>',
      `file holding the deployment secret that authenticates tier entries (or ${TIER_ENV.secret})`,
    )
    .option(
      '--insecure-tier',
      'run the Redis tier without a secret: its entries are not authenticated',
    )
    .option(
      '--tier-optional',
      'a tier that cannot be used at start is a warning, not an error (it runs degraded)',
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
export function parseTierOptions(
  raw: TierRawOptions,
  env: NodeJS.ProcessEnv = process.env,
): TiersOptions | undefined {
  const tiers: TiersOptions = {};
  if (raw.diskBytes !== undefined && raw.disk === undefined) {
    throw new InvalidArgumentError('--disk-bytes', 'needs --disk DIR');
  }
  if (raw.disk !== undefined) {
    if (raw.disk.trim() === '') throw new InvalidArgumentError('--disk', 'needs a directory');
    const bytesMax = intOption('--disk-bytes', raw.diskBytes, 1, Number.MAX_SAFE_INTEGER);
    tiers.disk = { dir: raw.disk, ...(bytesMax !== undefined ? { bytesMax } : {}) };
  }
  for (const [flag, given] of [
    ['--redis-ca', raw.redisCa],
    ['--redis-cert', raw.redisCert],
    ['--redis-key', raw.redisKey],
    ['--insecure-tier', raw.insecureTier],
  ] as const) {
    if (given !== undefined && raw.redis === undefined) {
      throw new InvalidArgumentError(flag, 'needs --redis');
    }
  }
  if (raw.redis !== undefined) tiers.redis = parseRedis(raw, env);
  if (tiers.disk === undefined && tiers.redis === undefined) {
    if (raw.tierSecretFile !== undefined) {
      throw new InvalidArgumentError('--tier-secret-file', 'needs --disk or --redis');
    }
    if (raw.tierOptional === true) {
      throw new InvalidArgumentError('--tier-optional', 'needs --disk or --redis');
    }
    return undefined;
  }
  const secret = readSecret(raw, env);
  if (secret !== undefined) {
    if (raw.insecureTier === true) {
      throw new InvalidArgumentError(
        '--insecure-tier',
        'contradicts the secret given: leave one of them out',
      );
    }
    tiers.secret = secret;
  }
  if (raw.tierOptional === true) tiers.optional = true;
  return tiers;
}

function parseRedis(
  raw: TierRawOptions,
  env: NodeJS.ProcessEnv,
): NonNullable<TiersOptions['redis']> {
  const urls = raw
    .redis!.split(',')
    .map((u) => u.trim())
    .filter((u) => u !== '');
  if (urls.length === 0) throw new InvalidArgumentError('--redis', 'needs at least one URL');
  const username = nonEmpty(env[TIER_ENV.redisUsername]);
  const password = nonEmpty(env[TIER_ENV.redisPassword]);
  const tls = {
    ...(raw.redisCa !== undefined ? { ca: readPem('--redis-ca', raw.redisCa) } : {}),
    ...(raw.redisCert !== undefined ? { cert: readPem('--redis-cert', raw.redisCert) } : {}),
    ...(raw.redisKey !== undefined ? { key: readPem('--redis-key', raw.redisKey) } : {}),
  };
  const redis: NonNullable<TiersOptions['redis']> = {
    urls,
    ...(username !== undefined ? { username } : {}),
    ...(password !== undefined ? { password } : {}),
    ...(Object.keys(tls).length > 0 ? { tls } : {}),
    ...(raw.insecureTier === true ? { insecure: true } : {}),
  };
  // Checked here so a bad URL is blamed on --redis (and never echoed with its password).
  const access = resolveRedisAccess('--redis', urls, {
    ...(username !== undefined ? { username } : {}),
    ...(password !== undefined ? { password } : {}),
  });
  if (redis.tls !== undefined && !access.tls) {
    throw new InvalidArgumentError(
      '--redis-ca/--redis-cert/--redis-key',
      'need rediss:// URLs (TLS is on only for those)',
    );
  }
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new InvalidArgumentError('--redis-cert', 'and --redis-key go together');
  }
  return redis;
}

/** The deployment secret from the environment or a file, or undefined; never from argv. */
function readSecret(raw: TierRawOptions, env: NodeJS.ProcessEnv): string | undefined {
  const fromEnv = nonEmpty(env[TIER_ENV.secret]);
  if (raw.tierSecretFile === undefined) return fromEnv;
  if (fromEnv !== undefined) {
    throw new InvalidArgumentError(
      '--tier-secret-file',
      `${TIER_ENV.secret} is set too: give the secret once`,
    );
  }
  // A trailing newline (echo, an editor) is not part of the secret.
  const secret = readText('--tier-secret-file', raw.tierSecretFile).replace(/\r?\n$/, '');
  if (secret === '') throw new InvalidArgumentError('--tier-secret-file', 'the file is empty');
  return secret;
}

function readPem(flag: string, file: string): string {
  const text = readText(flag, file);
  if (!text.includes('-----BEGIN ')) {
    throw new InvalidArgumentError(flag, `${file} is not PEM text (no -----BEGIN line)`);
  }
  return text;
}

function readText(flag: string, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new InvalidArgumentError(flag, `cannot read ${file} (${code})`);
  }
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === '' ? undefined : v;
}
