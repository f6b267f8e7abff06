// The load options of simulate and serve: what a request does when a chunk of
// its tier hit cannot be loaded (RuntimeOptions.loadFailurePolicy) and the
// recompute budget of a lookup (Config.maxRecomputePendingTokens).
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { LOAD_FAILURE_POLICIES } from '../lookup.js';
import type { LoadFailurePolicy } from '../lookup.js';
import { intOption } from './options.js';

export interface LoadRawOptions {
  loadFailurePolicy?: string;
  maxRecomputePendingTokens?: string;
}

export interface LoadOptions {
  loadFailurePolicy?: LoadFailurePolicy;
  maxRecomputePendingTokens?: number;
}

/** Largest recompute budget the CLI takes (a prompt's worth; the config takes any integer). */
const RECOMPUTE_BUDGET_MAX = 1 << 30;

export function addLoadOptions(cmd: Command): Command {
  return cmd
    .option(
      '--load-failure-policy <name>',
      `when a chunk of a tier hit fails to load: ${LOAD_FAILURE_POLICIES.join(', ')} (vLLM's kv_load_failure_policy; default recompute, from the first failed chunk)`,
    )
    .option(
      '--max-recompute-pending-tokens <n>',
      "recompute a pending suffix of up to this many tokens instead of waiting for it (vLLM's max_recompute_pending_tokens; default 0)",
    );
}

export function parseLoadOptions(raw: LoadRawOptions): LoadOptions {
  const out: LoadOptions = {};
  const policy = raw.loadFailurePolicy;
  if (policy !== undefined) {
    if (!(LOAD_FAILURE_POLICIES as readonly string[]).includes(policy)) {
      throw new InvalidArgumentError(
        '--load-failure-policy',
        `must be one of ${LOAD_FAILURE_POLICIES.join(', ')}`,
      );
    }
    out.loadFailurePolicy = policy as LoadFailurePolicy;
  }
  const budget = intOption(
    '--max-recompute-pending-tokens',
    raw.maxRecomputePendingTokens,
    0,
    RECOMPUTE_BUDGET_MAX,
  );
  if (budget !== undefined) out.maxRecomputePendingTokens = budget;
  return out;
}
