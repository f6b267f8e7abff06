// `kvoff serve`: an HTTP server embedding one OffloadRuntime (see
// src/serve/server.ts for the routes, docs/serve.md for the reference).
// Prints its bound address as one line, serves until SIGTERM or SIGINT, then
// drains: requests the runtime accepted finish, the runtime drains its copies
// and ends its workers, and the process exits 0 — or 1 if the drain ran out of
// time, the runtime failed, or the run left holes or mismatches.
import { isIP } from 'node:net';
import type { Command } from 'commander';
import { InvalidArgumentError, quoted } from '../errors.js';
import { STORE_POLICIES } from '../ready.js';
import { DEFAULT_SEED } from '../runtime/defaults.js';
import { OffloadRuntime } from '../runtime/runtime.js';
import { KvoffServer, SERVE_DEFAULTS } from '../serve/server.js';
import { TRANSFER_THREADS_MAX, intOptionOr, policyOption } from './options.js';
import { DEFAULT_RUNTIME_CONFIG } from '../runtime/defaults.js';
import { addTierOptions, parseNamespaceOptions, parseTierOptions } from './tier-options.js';
import { INSECURE_TIER_WARNING, TierWatch } from './tier-watch.js';
import type { TierRawOptions } from './tier-options.js';
import { addEventOptions, parseEventOptions } from './event-options.js';
import type { EventRawOptions } from './event-options.js';
import { count } from './term.js';
import { addLoadOptions, parseLoadOptions } from './load-options.js';
import type { LoadRawOptions } from './load-options.js';

interface ServeRawOptions extends TierRawOptions, EventRawOptions, LoadRawOptions {
  port: string;
  host: string;
  policy: string;
  transferThreads: string;
  seed: string;
  drainTimeoutMs: string;
  json?: boolean;
}

/** Signals that start a drain; a second one while draining exits at once. */
const DRAIN_SIGNALS = ['SIGTERM', 'SIGINT'] as const;

export function registerServe(program: Command): void {
  const cmd = program
    .command('serve')
    .description(
      'HTTP server embedding one OffloadRuntime: POST /v1/requests, POST /v1/reset, GET /v1/stats, GET /v1/events, GET /metrics, GET /healthz',
    )
    .option('--port <n>', 'TCP port (0 picks a free one)', '8080')
    .option('--host <addr>', 'address to bind', '127.0.0.1')
    .option('--policy <name>', `store policy: ${STORE_POLICIES.join(', ')}`, 'ready-prefix')
    .option(
      '--transfer-threads <n>',
      `piscina threads that copy chunks (1 to ${TRANSFER_THREADS_MAX})`,
      '1',
    )
    .option('--seed <n>', 'seed of the engine simulator and the lag', String(DEFAULT_SEED))
    .option(
      '--drain-timeout-ms <ms>',
      'on SIGTERM, how long requests in flight may take to finish',
      String(SERVE_DEFAULTS.drainTimeoutMs),
    )
    .option('--json', 'print the bound address (and the drain result) as JSON lines');
  addLoadOptions(addEventOptions(addTierOptions(cmd)))
    .addHelpText(
      'after',
      '\nPOST /v1/requests body: {"promptLength": 4096, "prefixId": 1, "maxDecodeTokens": 32}\n' +
        '  or {"promptTokens": [1, 2, 3], "maxDecodeTokens": 8, "cacheSalt": "tenant-1"}; answers the offload summary when the request ends.\n' +
        'POST /v1/reset body: {"shared": false} empties the host tier; {"shared": true} also retires this model\'s disk and Redis entries for every instance.\n' +
        'Errors are 4xx/5xx with {"error": {"code", "message"}}.\n' +
        'Exit codes: 0 drained after SIGTERM/SIGINT; 1 drain timed out, runtime failed, holes or mismatches; 2 bad options.\n' +
        'Under a supervisor run the server itself (node dist/src/cli.js serve, or exec node_modules/.bin/kvoff serve):\n' +
        '`npx kvoff serve` / `npm exec` do not forward SIGTERM. See docs/serve.md.',
    )
    .action(runServe);
}

/** `kvoff serve`'s action: start the runtime, listen, drain on the first signal. */
async function runServe(raw: ServeRawOptions): Promise<void> {
  const port = intOptionOr('--port', raw.port, 0, 65535, 8080);
  const transferThreads = intOptionOr(
    '--transfer-threads',
    raw.transferThreads,
    1,
    TRANSFER_THREADS_MAX,
    1,
  );
  const seed = intOptionOr('--seed', raw.seed, 0, 2 ** 31 - 1, DEFAULT_SEED);
  const drainTimeoutMs = intOptionOr(
    '--drain-timeout-ms',
    raw.drainTimeoutMs,
    1,
    3_600_000,
    60_000,
  );
  const hostRule = checkHost(raw.host);
  if (hostRule !== undefined) throw new InvalidArgumentError('--host', hostRule);
  const { runtime, tiers } = await startServeRuntime(raw, transferThreads, seed);
  const watch = tiers
    ? new TierWatch(
        () => runtime.stats().tiers,
        (line) => process.stderr.write(`${line}\n`),
      ).start()
    : undefined;
  const server = new KvoffServer(runtime, { drainTimeoutMs });
  let addr;
  try {
    addr = await server.listen(port, raw.host);
  } catch (err) {
    watch?.stop();
    await runtime.close();
    // Blame the option the error is about: a port in use or privileged, or an address not here.
    const code = (err as NodeJS.ErrnoException).code;
    const blamed = code === 'EADDRINUSE' || code === 'EACCES' ? '--port' : '--host';
    throw new InvalidArgumentError(
      blamed,
      `cannot listen on ${raw.host}:${port}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  const kvEvents = runtime.eventEndpoints;
  process.stdout.write(
    raw.json
      ? `${JSON.stringify({ url, host: addr.address, port: addr.port, ...(kvEvents ? { kvEvents } : {}) })}\n`
      : `kvoff serve listening on ${url}${kvEvents ? `; KV events on ${kvEvents.endpoint}${kvEvents.replayEndpoint ? `, replay ${kvEvents.replayEndpoint}` : ''}` : ''}\n`,
  );

  await drainOnSignal(raw, server, runtime, watch);
}

/** The runtime `kvoff serve` embeds, from its options. */
async function startServeRuntime(
  raw: ServeRawOptions,
  transferThreads: number,
  seed: number,
): Promise<{ runtime: OffloadRuntime; tiers: ReturnType<typeof parseTierOptions> }> {
  const policy = policyOption(raw.policy);
  const tiers = parseTierOptions(raw);
  const namespace = parseNamespaceOptions(raw);
  const events = parseEventOptions(raw);
  const { loadFailurePolicy, maxRecomputePendingTokens } = parseLoadOptions(raw);
  if (tiers?.redis?.insecure === true) process.stderr.write(`${INSECURE_TIER_WARNING}\n`);

  const runtime = await OffloadRuntime.start({
    config: {
      ...DEFAULT_RUNTIME_CONFIG,
      namespace,
      ...(maxRecomputePendingTokens !== undefined ? { maxRecomputePendingTokens } : {}),
    },
    ...(loadFailurePolicy ? { loadFailurePolicy } : {}),
    policy,
    transferThreads,
    lag: { seed },
    // Requests end when their client's decode budget is spent or they ask
    // to abort: the simulator aborts none at random by default.
    simulator: { seed },
    ...(tiers ? { tiers } : {}),
    // Always on: GET /v1/events streams them; --kv-events adds ZeroMQ.
    events: events ?? {},
  });
  return { runtime, tiers };
}

/** Waits for SIGTERM or SIGINT, drains, and reports how the drain went (exit code 1 unless clean). */
async function drainOnSignal(
  raw: ServeRawOptions,
  server: KvoffServer,
  runtime: OffloadRuntime,
  watch: TierWatch | undefined,
): Promise<void> {
  const signal = await new Promise<string>((resolve) => {
    for (const s of DRAIN_SIGNALS) process.once(s, () => resolve(s));
  });
  // A second signal while draining means "now".
  for (const s of DRAIN_SIGNALS) process.once(s, () => process.exit(1));
  if (!raw.json) process.stderr.write(`kvoff serve: ${signal}: draining\n`);
  const drain = await server.drain();
  watch?.stop();
  const stats = runtime.stats();
  // A supervisor must see a failed runtime: a clean exit is a clean run only.
  const clean =
    drain.drained &&
    drain.runtimeFailure === undefined &&
    stats.holes === 0 &&
    stats.mismatches === 0;
  const report = {
    signal,
    drained: drain.drained,
    abandoned: drain.abandoned,
    refusedUnstarted: drain.refusedUnstarted,
    runtimeFailure: drain.runtimeFailure ?? null,
    completed: stats.completed,
    chunksStored: stats.chunksStored,
    holes: stats.holes,
    mismatches: stats.mismatches,
  };
  if (raw.json) process.stdout.write(`${JSON.stringify(report)}\n`);
  else {
    const how =
      drain.runtimeFailure !== undefined
        ? `the runtime had failed (${drain.runtimeFailure})`
        : drain.drained
          ? 'drained'
          : `drain timed out with ${count(drain.abandoned, 'request')} in flight`;
    process.stderr.write(
      `kvoff serve: ${how}; ` +
        `${count(stats.completed, 'request')} completed, ${count(stats.chunksStored, 'chunk')} stored, holes ${stats.holes}, mismatches ${stats.mismatches}\n`,
    );
  }
  if (!clean) process.exitCode = 1;
}

/** Why `host` cannot be bound, or undefined: an IP address or a DNS name. */
function checkHost(host: string): string | undefined {
  const h = host.trim();
  if (h === '') return 'must not be empty';
  if (isIP(h) !== 0) return undefined;
  // Digits and dots only is meant as IPv4: 999.1.1.1 is not one.
  if (/^[\d.]+$/.test(h)) return `${quoted(host)} is not an IPv4 address`;
  const label = /^(?!-)[a-z\d-]{1,63}(?<!-)$/i;
  if (h.length <= 253 && h.split('.').every((l) => label.test(l))) return undefined;
  return `${quoted(host)} is not an IP address or host name`;
}
