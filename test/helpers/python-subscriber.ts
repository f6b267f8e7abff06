// The Python KV-event subscriber (test/fixtures/kv_events_subscriber.py, on
// Debian's python3-zmq and python3-msgpack) as a child process: its JSON lines
// parsed as they arrive. /usr/bin/python3 by name, since another python3
// earlier on PATH may lack Debian's packages; .ci/run installs them.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const SYSTEM_PYTHON = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('../fixtures/kv_events_subscriber.py', import.meta.url));

/** One batch as the subscriber decoded it (vLLM's field names, hashes as decimal strings). */
export interface DecodedBatch {
  seq: number;
  via: 'live' | 'replay';
  ts: number;
  events: Record<string, unknown>[];
  data_parallel_rank: number | null;
}

export class PythonSubscriber {
  private readonly exited: Promise<number | null>;
  private constructor(
    private readonly child: ChildProcess,
    readonly endpoint: string,
    readonly batches: DecodedBatch[],
    private readonly errors: { text: string },
  ) {
    this.exited = new Promise((r) => {
      if (child.exitCode !== null) r(child.exitCode);
      else child.once('exit', (code) => r(code));
    });
  }

  private get stderr(): string {
    return this.errors.text;
  }

  /** Starts it and waits (bounded) for its SUB socket to be bound or connected. */
  static async start(args: readonly string[], timeoutMs = 20_000): Promise<PythonSubscriber> {
    const child = spawn(SYSTEM_PYTHON, [SCRIPT, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const lines = createInterface({ input: child.stdout! });
    const errors = { text: '' };
    child.stderr!.on('data', (d: Buffer) => (errors.text += d.toString()));
    const batches: DecodedBatch[] = [];
    const ready = new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('subscriber not ready')), timeoutMs);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`subscriber exited with ${code}`));
      });
      lines.on('line', (line) => {
        const v = JSON.parse(line) as { ready?: string } & DecodedBatch;
        if (v.ready !== undefined) {
          clearTimeout(timer);
          resolve(v.ready);
        } else batches.push(v);
      });
    });
    try {
      return new PythonSubscriber(child, await ready, batches, errors);
    } catch (err) {
      child.kill('SIGKILL');
      throw new Error(`${(err as Error).message}: ${errors.text}`, { cause: err });
    }
  }

  send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }

  /** Waits (bounded, on timers) until `done()` holds for what arrived. */
  async until(done: (batches: DecodedBatch[]) => boolean, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!done(this.batches)) {
      if (Date.now() > deadline) {
        throw new Error(
          `subscriber: condition not met; ${this.batches.length} batches; ${this.stderr}`,
        );
      }
      if (this.child.exitCode !== null) {
        throw new Error(`subscriber exited with ${this.child.exitCode}: ${this.stderr}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Asks it to stop; resolves with its exit code and what it wrote on stderr. */
  async stop(): Promise<{ code: number | null; stderr: string }> {
    if (this.child.exitCode === null) this.send('stop');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    const code = await this.exited;
    clearTimeout(timer);
    return { code, stderr: this.stderr };
  }
}
