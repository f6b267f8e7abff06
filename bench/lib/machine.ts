// What the results were measured on: CPU model, cores, memory, Node version and
// the git commit. Deliberately no hostname, user or path.
import { execFileSync } from 'node:child_process';
import os from 'node:os';

export interface MachineInfo {
  readonly cpuModel: string;
  readonly cores: number;
  readonly memoryBytes: number;
  readonly nodeVersion: string;
  readonly v8Version: string;
  readonly platform: string;
  readonly arch: string;
  /** 1-minute load average when the run started: other work on a shared machine shows here. */
  readonly loadAverage1m: number;
}

export interface CommitInfo {
  readonly commit: string;
  /** True when tracked files differ from the commit (the numbers may not match it exactly). */
  readonly dirty: boolean;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: os.availableParallelism(),
    memoryBytes: os.totalmem(),
    nodeVersion: process.version,
    v8Version: process.versions.v8,
    platform: process.platform,
    arch: process.arch,
    loadAverage1m: os.loadavg()[0] ?? 0,
  };
}

export function commitInfo(): CommitInfo {
  try {
    const commit = git(['rev-parse', 'HEAD']);
    const dirty = git(['status', '--porcelain', '--untracked-files=no']).length > 0;
    return { commit, dirty };
  } catch {
    return { commit: 'unknown', dirty: false };
  }
}

function git(args: string[]): string {
  return execFileSync('git', args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  }).trim();
}
