#!/usr/bin/env node
// The kvoff command. Each subcommand lives in src/commands/ and registers
// itself here; this file only wires them and turns errors into one clear line
// (with the stack only under --debug) and a documented exit code.
import { existsSync, readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { KvoffError, quoted } from './errors.js';
import { registerDemo } from './commands/demo.js';
import { registerServe } from './commands/serve.js';
import { registerSimulate } from './commands/simulate.js';
import { registerFuzz } from './commands/fuzz.js';

/** Exit codes: 0 success, 1 the run found a problem (violation, hole, crash policy), 2 bad usage or config, 3 internal error. */
export const EXIT = { ok: 0, found: 1, usage: 2, internal: 3 } as const;

/** The package's version, from the package.json above this file (src/ or dist/src/). */
export function packageVersion(): string {
  for (const rel of ['../package.json', '../../package.json']) {
    const url = new URL(rel, import.meta.url);
    if (!existsSync(url)) continue;
    const pkg = JSON.parse(readFileSync(url, 'utf8')) as { name?: string; version?: string };
    if (pkg.name === 'kvoff' && pkg.version) return pkg.version;
  }
  return 'unknown';
}

export function buildProgram(): Command {
  const program = new Command('kvoff')
    .description(
      'KV-cache offloading store path on worker_threads: only the ready prefix is ever stored',
    )
    .version(packageVersion(), '-V, --version', 'print the version')
    .option('--debug', 'print stack traces of errors')
    // Usage errors are printed by main() as one line with a hint; commander stays quiet.
    .configureOutput({ outputError: () => undefined })
    .exitOverride();
  registerSimulate(program);
  registerDemo(program);
  registerServe(program);
  registerFuzz(program);
  return program;
}

async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) return EXIT.ok;
      // `kvoff` alone (or an unknown command) shows the help, as `git` does.
      if (err.code === 'commander.help' || err.code === 'commander.helpDisplayed')
        return EXIT.usage;
      process.stderr.write(`${usageLine(err.message, argv)}\n`);
      return EXIT.usage;
    }
    const debug = argv.includes('--debug');
    if (err instanceof KvoffError) {
      // A tier given explicitly that cannot be used is a configuration error: say how to go on without it.
      const hint =
        err.code === 'KVOFF_TIER_UNAVAILABLE' ? ' (--tier-optional runs without it, degraded)' : '';
      process.stderr.write(`kvoff: ${err.message}${hint}\n`);
      if (debug && err.stack) process.stderr.write(`${err.stack}\n`);
      return err.code === 'KVOFF_INVALID_CONFIG' ||
        err.code === 'KVOFF_INVALID_ARGUMENT' ||
        err.code === 'KVOFF_UNKNOWN_POLICY' ||
        err.code === 'KVOFF_TIER_UNAVAILABLE' ||
        err.code === 'KVOFF_INVALID_TRACE'
        ? EXIT.usage
        : EXIT.found;
    }
    process.stderr.write(
      `kvoff: internal error: ${err instanceof Error ? err.message : String(err)}\n`,
    );
    if (debug && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
    return EXIT.internal;
  }
}

/** `kvoff: unknown option '--foo' (see kvoff simulate --help)`: one line, with where to look. */
export function usageLine(message: string, argv: readonly string[]): string {
  const text = message
    .replace(/^error:\s*/, '')
    .replace(/\s*\n\s*/g, ' ')
    .trim()
    // Commander quotes what was typed ('--foo'): echo it bounded, as kvoff's own errors do.
    .replace(/'([^']*)'/g, (_, typed: string) => quoted(typed).replace(/^"|"(?=…)|"$/g, "'"));
  const names = buildProgram().commands.map((c) => c.name());
  const command = argv.slice(2).find((a) => names.includes(a));
  return `kvoff: ${text} (see kvoff ${command ? `${command} ` : ''}--help)`;
}

// A reader that went away (`kvoff simulate | head`) ends the output, not the
// program with a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code !== 'EPIPE') throw err;
  process.exit(typeof process.exitCode === 'number' ? process.exitCode : EXIT.ok);
});

main(process.argv).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`kvoff: ${String(err)}\n`);
    process.exitCode = EXIT.internal;
  },
);
