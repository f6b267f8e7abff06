// Running the kvoff command in a child process, as a user would (the built
// command, node dist/src/cli.js ...), with colour off and no TTY.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `kvoff ...args` to the end (killed after timeoutMs) as a user of the
 * package does: the built command (`node dist/src/cli.js`, which the test
 * setup keeps fresh). From source every child and each of its workers compiles
 * the TypeScript with tsx first: a small simulate took 9.4 s that way against
 * 3.0 s built at load 26, and a file of ten side by side ran past its 60 s.
 */
export function runCli(
  args: readonly string[],
  options: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<CliRun> {
  return runNode(['dist/src/cli.js', ...args], {
    env: { NO_COLOR: '1', ...options.env },
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
  });
}

/**
 * Runs `node ...nodeArgs` from the repository root to the end (killed after
 * timeoutMs, 120 s by default): a host program under flags, or the CLI.
 */
export function runNode(
  nodeArgs: readonly string[],
  options: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, nodeArgs, {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...options.env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * A small workload that runs in seconds: the pool holds it (no preemption),
 * and a slow hasher (one hash per wake-up, up to 4 ms apart) makes keys lag
 * token progress by far, so chunks are deferred and
 * the legacy policies show their bugs.
 */
export const SMALL_WORKLOAD = [
  '--requests',
  '4',
  '--prompt-tokens',
  '2048',
  '--gpu-tokens',
  '65536',
  '--decode-tokens',
  '16',
  '--lag-hashes-per-wake',
  '1',
  '--lag-jitter-ms',
  '4',
  // Room for the workload's chunks without eviction, and small blocks: these
  // runs check behaviour, side by side on a loaded box, not copy volume.
  '--tier-chunks',
  '2048',
  '--block-bytes',
  '256',
] as const;
