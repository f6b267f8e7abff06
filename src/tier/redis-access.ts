// How kvoff reaches a Redis Cluster: the seed endpoints, the credentials and
// the TLS settings, resolved once from the URLs and the options, and applied
// to every node client (the seed's and each discovered node's alike: node-redis
// builds a discovered node's client from the cluster's `defaults` only, so
// credentials left in a seed URL reached the seed and nothing else).
//
// URLs are parsed here, never by node-redis, and a URL is never echoed with
// its credentials: a message shows it through redactUrl, which hides
// everything between the scheme and the last '@' even when the URL does not
// parse. Credentials are kept out of every message, log line, JSON and metric.
import { InvalidArgumentError, quoted } from '../errors.js';

export interface RedisEndpoint {
  readonly host: string;
  readonly port: number;
}

/** PEM text (not file names: the options cross into the store worker as data). */
export interface RedisTlsOptions {
  /** CA certificates that may sign the nodes' certificates; default: Node's bundled roots. */
  readonly ca?: string;
  /** Client certificate, for clusters that require one (tls-auth-clients). */
  readonly cert?: string;
  /** The client certificate's private key. */
  readonly key?: string;
  /** Name the nodes' certificates must carry, when it is not the address connected to. */
  readonly servername?: string;
}

export interface RedisAccess {
  readonly endpoints: readonly RedisEndpoint[];
  readonly tls: boolean;
  readonly username?: string;
  readonly password?: string;
  readonly tlsOptions?: RedisTlsOptions;
}

const DEFAULT_PORT = 6379;

/** `redis://user:pass@host:7000` -> `redis://***@host:7000`; safe for any string. */
function redactUrl(text: string): string {
  const at = text.lastIndexOf('@');
  if (at < 0) return text;
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(text)?.[0] ?? '';
  return `${scheme}***${text.slice(at)}`;
}

/**
 * One node's URL, checked: redis:// or rediss:// (the scheme of the URLs before
 * it), a host and port, no path or query.
 */
function parseNodeUrl(field: string, raw: unknown, where: string, scheme: string | undefined): URL {
  if (typeof raw !== 'string') throw new InvalidArgumentError(field, `${where} is not a string`);
  // Redacted (no password) and cut (no unbounded echo of what the caller sent).
  const shown = quoted(redactUrl(raw));
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // The TypeError's `input` holds the whole URL: never let it out.
    throw new InvalidArgumentError(
      field,
      `${where} ${shown} is not a redis://[user:password@]host:port URL`,
    );
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new InvalidArgumentError(field, `${where} ${shown} is not a redis:// or rediss:// URL`);
  }
  if (scheme !== undefined && url.protocol !== scheme) {
    throw new InvalidArgumentError(field, 'mixes redis:// and rediss:// URLs');
  }
  if (url.hostname === '' || (url.pathname !== '' && url.pathname !== '/') || url.search) {
    throw new InvalidArgumentError(
      field,
      `${where} ${shown} must be scheme://[user:password@]host[:port] (no path or query: a cluster has one database)`,
    );
  }
  return url;
}

/**
 * The access the URLs and options describe. Every URL uses one scheme
 * (redis:// or rediss://); credentials come from the options first, then
 * from the URLs (which must agree). Throws InvalidArgumentError naming the
 * field and never the secret.
 */
export function resolveRedisAccess(
  field: string,
  urls: readonly unknown[],
  options: { username?: unknown; password?: unknown; tls?: unknown } = {},
): RedisAccess {
  if (!Array.isArray(urls) || urls.length === 0) {
    throw new InvalidArgumentError(field, 'must name at least one node');
  }
  const endpoints: RedisEndpoint[] = [];
  let scheme: string | undefined;
  let urlUser: string | undefined;
  let urlPassword: string | undefined;
  urls.forEach((raw, i) => {
    const url = parseNodeUrl(field, raw, urls.length > 1 ? `URL ${i + 1}` : 'the URL', scheme);
    scheme = url.protocol;
    const user = url.username === '' ? undefined : decodeURIComponent(url.username);
    const password = url.password === '' ? undefined : decodeURIComponent(url.password);
    if (
      (user !== undefined && urlUser !== undefined && user !== urlUser) ||
      (password !== undefined && urlPassword !== undefined && password !== urlPassword)
    ) {
      throw new InvalidArgumentError(field, 'URLs give different credentials');
    }
    urlUser ??= user;
    urlPassword ??= password;
    endpoints.push({
      host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: url.port === '' ? DEFAULT_PORT : Number(url.port),
    });
  });
  const text = (name: string, v: unknown): string | undefined => {
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || v === '') {
      throw new InvalidArgumentError(
        `${field.replace(/\.urls$/, '')}.${name}`,
        'must be a non-empty string',
      );
    }
    return v;
  };
  const username = text('username', options.username) ?? urlUser;
  const password = text('password', options.password) ?? urlPassword;
  if (username !== undefined && password === undefined) {
    throw new InvalidArgumentError(field, `user "${username}" is given without a password`);
  }
  const tls = scheme === 'rediss:';
  const tlsOptions = checkTls(field.replace(/\.urls$/, '.tls'), options.tls);
  if (tlsOptions !== undefined && !tls) {
    throw new InvalidArgumentError(
      field.replace(/\.urls$/, '.tls'),
      'TLS options need rediss:// URLs (TLS is on only for those)',
    );
  }
  return {
    endpoints,
    tls,
    ...(username !== undefined ? { username } : {}),
    ...(password !== undefined ? { password } : {}),
    ...(tlsOptions !== undefined ? { tlsOptions } : {}),
  };
}

function checkTls(field: string, v: unknown): RedisTlsOptions | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw new InvalidArgumentError(field, 'must be an object');
  }
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!['ca', 'cert', 'key', 'servername'].includes(k)) {
      throw new InvalidArgumentError(field, `unknown option "${k}" (ca, cert, key, servername)`);
    }
    if (o[k] !== undefined && (typeof o[k] !== 'string' || o[k] === '')) {
      throw new InvalidArgumentError(`${field}.${k}`, 'must be a non-empty string (PEM text)');
    }
  }
  if ((o.cert === undefined) !== (o.key === undefined)) {
    throw new InvalidArgumentError(field, 'cert and key go together');
  }
  return o as RedisTlsOptions;
}

/** `text` with every occurrence of the password replaced: for messages built from a library's error. */
export function scrubCredentials(text: string, access: RedisAccess): string {
  const secret = access.password;
  return secret !== undefined && secret.length > 0 ? text.split(secret).join('***') : text;
}
