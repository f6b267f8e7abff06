// The serve load test, shared by `npm run bench:serve` (bench/serve-load.ts)
// and the short version in the test suite: start `kvoff serve` as a child
// process on loopback, drive POST /v1/requests with autocannon, read the
// server's own /v1/stats (holes, event-loop delay), then SIGTERM it and check
// that it drained and exited 0.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface ServeChild {
  child: ChildProcess;
  url: string;
  /** The whole JSON line the server printed (url, host, port, kvEvents). */
  info: Record<string, unknown>;
  /** stderr so far (for failure messages). */
  stderr(): string;
  /** Resolves with the exit code (or the signal name) once the process ended. */
  exited: Promise<number | string>;
}

/**
 * Starts `kvoff serve --port 0 --json` from source (node --import tsx) and
 * resolves once it printed its address. Refuses anything but loopback.
 */
export async function startServeChild(
  args: readonly string[] = [],
  timeoutMs = 60_000,
): Promise<ServeChild> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/cli.ts',
      'serve',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--json',
      ...args,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } },
  );
  let err = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (s: string) => {
    if (err.length < 64_000) err += s;
  });
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown'));
  });
  const lines = createInterface({ input: child.stdout! });
  const info = await new Promise<{ url: string } & Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kvoff serve did not print its address within ${timeoutMs} ms: ${err}`));
    }, timeoutMs);
    lines.once('line', (line) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(line) as { url: string } & Record<string, unknown>);
      } catch {
        reject(new Error(`kvoff serve printed ${line}`));
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`kvoff serve exited (${code}) before listening: ${err}`));
    });
  });
  const url = info.url;
  if (!url.startsWith('http://127.0.0.1:')) throw new Error(`not loopback: ${url}`);
  return { child, url, info, stderr: () => err, exited };
}

export interface LoadOptions {
  connections: number;
  /** How long the load runs (the benchmark's form). */
  durationS: number;
  /**
   * Instead of a duration, how many requests complete before the load ends
   * (a test's form: a fixed window finished no request on a starved machine).
   */
  requestsMax?: number;
  /** How long one request may take before autocannon counts a timeout (its default is 10 s). */
  requestTimeoutS?: number;
  /** Bodies cycled through by the connections. */
  bodies: readonly string[];
}

export interface LoadResult {
  connections: number;
  durationS: number;
  requests: number;
  requestsPerSecond: number;
  latencyMsP50: number;
  latencyMsP99: number;
  latencyMsMax: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  /** From the server's /v1/stats after the load. */
  holes: number;
  mismatches: number;
  chunksStored: number;
  chunksDeferred: number;
  eventLoopDelayMsP99: number;
  eventLoopDelayMsMax: number;
  /** Exit code of the server after SIGTERM. */
  exitCode: number | string;
}

/** Default bodies: a few shared prefixes (tier hits) and unique prompts. */
export function defaultBodies(count = 16): string[] {
  return Array.from({ length: count }, (_, i) =>
    JSON.stringify({ promptLength: 1024 + 256 * (i % 8), prefixId: i % 4, maxDecodeTokens: 16 }),
  );
}

export async function runServeLoad(
  server: ServeChild,
  options: LoadOptions,
): Promise<Omit<LoadResult, 'exitCode'>> {
  let next = 0;
  const result = await autocannon({
    url: `${server.url}/v1/requests`,
    connections: options.connections,
    duration: options.durationS,
    ...(options.requestsMax !== undefined ? { amount: options.requestsMax } : {}),
    ...(options.requestTimeoutS !== undefined ? { timeout: options.requestTimeoutS } : {}),
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    requests: [
      {
        setupRequest: (req) => {
          const body = options.bodies[next % options.bodies.length]!;
          next += 1;
          return { ...req, body };
        },
      },
    ],
  });
  const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as {
    holes: number;
    mismatches: number;
    chunksStored: number;
    chunksDeferred: number;
    eventLoopDelayMs: { p99: number; max: number };
  };
  return {
    connections: options.connections,
    // autocannon's own measure: the window asked for, or how long the requests took.
    durationS: result.duration,
    requests: result.requests.total,
    requestsPerSecond: result.requests.average,
    latencyMsP50: result.latency.p50,
    latencyMsP99: result.latency.p99,
    latencyMsMax: result.latency.max,
    errors: result.errors,
    timeouts: result.timeouts,
    non2xx: result.non2xx,
    holes: stats.holes,
    mismatches: stats.mismatches,
    chunksStored: stats.chunksStored,
    chunksDeferred: stats.chunksDeferred,
    eventLoopDelayMsP99: stats.eventLoopDelayMs.p99,
    eventLoopDelayMsMax: stats.eventLoopDelayMs.max,
  };
}

/** SIGTERM, then the exit code; SIGKILL after `timeoutMs` so nothing is left behind. */
export async function stopServeChild(
  server: ServeChild,
  timeoutMs = 60_000,
): Promise<number | string> {
  server.child.kill('SIGTERM');
  const timer = setTimeout(() => server.child.kill('SIGKILL'), timeoutMs);
  try {
    return await server.exited;
  } finally {
    clearTimeout(timer);
  }
}
