// piscina task file: each transfer thread runs one long-lived task that drains
// its job ring, copying between the arenas handed over once through
// workerData. No logic here: see src/runtime/transfer.ts.
import { workerData } from 'piscina';
import { attachArenas, runTransferRing } from '../src/runtime/transfer.js';
import type { AttachedArenas, TransferArenas, TransferRingSpec } from '../src/runtime/transfer.js';

let arenas: AttachedArenas | undefined;

export default function transfer(spec: TransferRingSpec): number {
  arenas ??= attachArenas(workerData as TransferArenas);
  return runTransferRing(arenas, spec);
}
