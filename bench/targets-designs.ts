// The design comparison's targets (benchmark 3), checked against one run's
// figures. Every sentence that compares designs, in what was measured and in
// why a target was missed, is built from the figures of that same run: a
// number is quoted from a row, and a word like "lower" or "cheaper" is chosen
// by comparing two of them, never written in advance.
import type { DesignName, DesignResults, DesignRow } from './designs/run.js';
import type { Figure } from './lib/stats.js';
import { check, fmt } from './target-check.js';
import type { TargetCheck } from './target-check.js';

/** The baselines kvoff was first held to; bLean is kept but is handicapped by design (a message per event). */
const BASELINES = ['b', 'c', 'bLean', 'bLeanBatched', 'cLean'] as const;
const HANDICAPPED: ReadonlySet<string> = new Set(['bLean']);
const label = (d: string) => (HANDICAPPED.has(d) ? `${d} (handicapped by design)` : d);

/** The figures of one writer count, by design. */
class WriterRows {
  constructor(
    readonly d: DesignResults,
    readonly writers: number,
    readonly rows: readonly DesignRow[],
  ) {}
  get(design: DesignName): DesignRow | undefined {
    return this.rows.find((r) => r.design === design);
  }
  get chunks(): number {
    return this.d.requests * this.d.chunksPerRequest;
  }
  get eventsPerRound(): number {
    return this.d.requests * 3;
  }
  /** The paced runs' interval between rounds, ms (NaN when this file has no load for these writers). */
  get loadRoundMs(): number {
    const load = this.d.loads.find((l) => l.writers === this.writers);
    return load === undefined
      ? Number.NaN
      : (this.eventsPerRound / load.offeredEventsPerSecond) * 1000;
  }
  /** Chunks of one paced run. */
  get loadChunks(): number {
    return this.d.requests * (this.d.loadChunks ?? this.d.chunksPerRequest);
  }
  /** Jobs per run of a design, as its store counted them (NaN where it did not). */
  jobs(design: DesignName): number {
    return this.get(design)?.store.jobs ?? Number.NaN;
  }
  /** Jobs per run in words: "1024", or "uncounted" where the store did not count them. */
  jobsText(design: DesignName): string {
    const n = this.jobs(design);
    return Number.isFinite(n) ? fmt(n, 0) : 'uncounted';
  }
}

const med = (f: Figure | undefined) => f?.median ?? Number.NaN;
const ns = (f: Figure | undefined) => `${fmt(med(f), 0)} ns`;
/** "lower" / "higher" / "equal" by comparing a with b (within 1%: equal). */
function compare(a: number, b: number, lower = 'lower', higher = 'higher'): string {
  if (!Number.isFinite(a) || !Number.isFinite(b)) return 'not comparable';
  if (Math.abs(a - b) <= 0.01 * Math.max(Math.abs(a), Math.abs(b))) return 'equal';
  return a < b ? lower : higher;
}

/** "N ns per event (writers W, store S)" where the run measured each thread, else the total. */
function perEvent(row: DesignRow | undefined): string {
  if (row === undefined) return 'not measured';
  // Files from before the per-run measure hold events per CPU-second of the whole run only.
  if (row.cpuNsPerEvent === undefined)
    return `${fmt(1e9 / row.eventsPerCpuSecond.median, 0)} ns per event (whole run)`;
  const w = row.writerCpuNsPerEvent;
  const s = row.storeCpuNsPerEvent;
  const total = `${ns(row.cpuNsPerEvent)} per event`;
  return w && s ? `${total} (writers ${ns(w)}, store ${ns(s)})` : total;
}

/** Designs named in a sentence: "b, c and bLean". */
function names(list: readonly string[]): string {
  if (list.length <= 1) return list.join('');
  return `${list.slice(0, -1).join(', ')} and ${list[list.length - 1]!}`;
}

export function designTargets(d: DesignResults): TargetCheck[] {
  const out: TargetCheck[] = [];
  for (const writers of [...new Set(d.rows.map((r) => r.writers))]) {
    const w = new WriterRows(
      d,
      writers,
      d.rows.filter((r) => r.writers === writers),
    );
    if (w.get('a') === undefined) continue;
    out.push(everyBaselineCpu(w), everyBaselineLatency(w));
    out.push(mechanismCpu(w), fullPathCpu(w), latencyAtLoadVsCLean(w), latencyAtMaxRate(w));
  }
  return out;
}

/** The first target: a >= 2x every baseline in events per CPU-second. */
function everyBaselineCpu(w: WriterRows): TargetCheck {
  const a = w.get('a')!;
  const base = BASELINES.flatMap((n) => (w.get(n) ? [w.get(n)!] : []));
  const cpu = base.map((r) => ({ design: r.design, x: r.aCpuAdvantage.median }));
  const missed = cpu.filter((c) => !(c.x >= 2));
  const aLean = w.get('aLean');
  const cheaper = cpu.filter((c) => c.x > 1).map((c) => label(c.design));
  const dearer = cpu.filter((c) => c.x < 1).map((c) => label(c.design));
  const why = [
    `Per event a spent ${perEvent(a)}; the floor (one thread, nothing handed over) ${perEvent(w.get('floor'))}.`,
    `a used less CPU per event than ${cheaper.length ? names(cheaper) : 'no baseline'}${dearer.length ? ` and more than ${names(dearer)}` : ''}.`,
    `Jobs per run for ${w.chunks} chunks: a ${w.jobsText('a')}, c ${w.jobsText('c')}, b ${w.jobsText('b')}, cLean ${w.jobsText('cLean')}.`,
    aLean
      ? `aLean, kvoff's publication protocol without the role code and the planner, spent ${perEvent(aLean)}: ${fmt(100 * (1 - med(aLean.cpuNsPerEvent) / med(a.cpuNsPerEvent)), 0)}% of a's CPU per event is role code, hashing and planner work, not the mechanism (see mechanism-cpu and full-path-cpu).`
      : 'aLean was not measured in this run.',
  ].join(' ');
  return check(
    `designs-cpu-${w.writers}w`,
    `(a) kvoff >= 2x every baseline in events per CPU-second, ${w.writers} writer(s)`,
    `${cpu.map((c) => `${label(c.design)} ${fmt(c.x)}x`).join(', ')}; jobs per run ${w.rows
      .filter((r) => r.store.jobs !== undefined)
      .map((r) => `${r.design} ${Math.round(r.store.jobs!)}`)
      .join(', ')} for ${w.chunks} chunks`,
    missed.length === 0,
    missed.map((c) => `${c.design}: ${fmt(2 / c.x)}x short`).join(', '),
    why,
    'See mechanism-cpu (what the protocol alone can gain over a batched lock) and full-path-cpu (where the rest of the CPU goes).',
  );
}

/** The first latency target: a's p99 at 50% load <= 1/3 of every baseline's. */
function everyBaselineLatency(w: WriterRows): TargetCheck {
  const base = BASELINES.flatMap((n) => (w.get(n) ? [w.get(n)!] : []));
  const lat = base
    .filter((r) => r.loadLatencyP99OverA !== undefined)
    .map((r) => ({ design: r.design, x: r.loadLatencyP99OverA!.median }));
  const missed = lat.filter((c) => !(c.x >= 3));
  const load = w.d.loads.find((l) => l.writers === w.writers);
  const a = w.get('a')!;
  const higher = lat.filter((c) => c.x > 1).map((c) => label(c.design));
  const lowerOrEqual = lat.filter((c) => !(c.x > 1)).map((c) => label(c.design));
  return check(
    `designs-latency-${w.writers}w`,
    `(a) kvoff p99 publication -> dispatch <= 1/3 of every baseline's at 50% of the slowest design's capacity, ${w.writers} writer(s)`,
    `baseline p99 / kvoff p99: ${lat.map((c) => `${label(c.design)} ${fmt(c.x)}x`).join(', ')}${load ? ` (offered ${Math.round(load.offeredEventsPerSecond)} events/s)` : ''}`,
    lat.length === base.length && missed.length === 0,
    missed.map((c) => `${c.design}: ${fmt(c.x)}x of the 3x`).join(', '),
    `At this load every store is woken once per round by its doorbell or its messages. a's p99 was ${fmt(med(a.loadLatencyMsP99), 3)} ms; ${higher.length ? `higher for ${names(higher)}` : 'no baseline was higher'}${lowerOrEqual.length ? `, lower or equal for ${names(lowerOrEqual)}` : ''}. ${storeWorkPerRound(w)}`,
    'See latency-load-clean: what a adds per round over cLean is its store work.',
  );
}

/** The store's CPU per round of publications at the maximum rate, a against cLean (what a wake-up must do). */
function storeWorkPerRound(w: WriterRows): string {
  const perRound = (r: DesignRow | undefined) =>
    med(r?.storeCpuNsPerEvent) * w.eventsPerRound * 1e-3;
  const a = perRound(w.get('a'));
  const c = perRound(w.get('cLean'));
  if (!Number.isFinite(a) || !Number.isFinite(c))
    return 'The store threads were not measured apart.';
  return `At the maximum rate a's store spent ${fmt(a, 1)} us of CPU per round of ${w.eventsPerRound} publications, cLean's ${fmt(c, 1)} us.`;
}

/** Issue 30, 1: the mechanism alone (aLean) >= 2x cLean and bLeanBatched in events per CPU-second. */
function mechanismCpu(w: WriterRows): TargetCheck {
  const id = `mechanism-cpu-${w.writers}w`;
  const target = `(aLean) kvoff's publication protocol alone >= 2x cLean and >= 2x bLeanBatched in events per CPU-second, ${w.writers} writer(s)`;
  const aLean = w.get('aLean');
  const cLean = w.get('cLean');
  const batched = w.get('bLeanBatched');
  const floor = w.get('floor');
  if (!aLean || !cLean || !batched || !floor)
    return notMeasured(id, target, 'aLean, cLean, bLeanBatched or the floor');
  const xc = cLean.aLeanCpuAdvantage.median;
  const xb = batched.aLeanCpuAdvantage.median;
  const bound = cLean.cpuOverFloor.median;
  const missed = [
    ...(xc >= 2 ? [] : [`cLean: ${fmt(2 / xc)}x short`]),
    ...(xb >= 2 ? [] : [`bLeanBatched: ${fmt(2 / xb)}x short`]),
  ];
  const roundsPerWriter = w.writers === 1 ? 3 * w.d.requests : w.d.requests;
  return check(
    id,
    target,
    `aLean / cLean ${fmt(xc)}x, aLean / bLeanBatched ${fmt(xb)}x; per event aLean ${perEvent(aLean)}, cLean ${perEvent(cLean)}, bLeanBatched ${perEvent(batched)}, the floor ${perEvent(floor)}`,
    missed.length === 0,
    missed.join(', '),
    [
      `cLean spent ${fmt(bound)}x the floor's CPU per event, so even a design at the floor would be ${fmt(bound)}x cLean${bound < 2 ? ': no design can reach 2x cLean on this stream' : ''}.`,
      writersSentence(aLean, cLean, floor, roundsPerWriter),
      `aLean's store spent ${ns(aLean.storeCpuNsPerEvent)} per event, ${compare(med(aLean.storeCpuNsPerEvent), med(cLean.storeCpuNsPerEvent))} than cLean's ${ns(cLean.storeCpuNsPerEvent)}, with ${w.jobsText('aLean')} and ${w.jobsText('cLean')} jobs for ${w.chunks} chunks.`,
    ].join(' '),
    bound < 2
      ? `Nothing on this stream: a lock taken once per batch costs ${fmt(med(cLean.cpuNsPerEvent) - med(floor.cpuNsPerEvent), 0)} ns per event over the floor here, less than the floor itself. A lock-free protocol saves CPU only where a lock is taken per event or its holder is preempted while others wait for it; its case on 2 cores is progress and latency (latency-load-clean).`
      : 'Cheaper publications: fewer atomic operations per event (counts published once per batch rather than per request).',
  );
}

/** aLean's writers against cLean's; the reason given only where it is the one that fits the figures. */
function writersSentence(
  aLean: DesignRow,
  cLean: DesignRow,
  floor: DesignRow,
  roundsPerWriter: number,
): string {
  const x = med(aLean.writerCpuNsPerEvent);
  const y = med(cLean.writerCpuNsPerEvent);
  const word = compare(x, y);
  const reason =
    word === 'higher'
      ? `: aLean publishes each count with an Atomics.store, where cLean writes plainly under a lock taken once per ${roundsPerWriter} publications`
      : word === 'lower'
        ? `: cLean's writers take the lock once per ${roundsPerWriter} publications and wait for it while another thread holds it`
        : '';
  return `aLean's writers spent ${ns(aLean.writerCpuNsPerEvent)} per event, ${word} than cLean's ${ns(cLean.writerCpuNsPerEvent)} (the floor's publications: ${ns(floor.writerCpuNsPerEvent)})${reason}.`;
}

/** Issue 30, 2: a within 1.5x of aLean's CPU per event, and at least cLean's events per CPU-second. */
function fullPathCpu(w: WriterRows): TargetCheck {
  const id = `full-path-cpu-${w.writers}w`;
  const target = `(a) kvoff's full path within 1.5x of aLean's CPU per event and >= cLean's events per CPU-second, ${w.writers} writer(s)`;
  const a = w.get('a')!;
  const aLean = w.get('aLean');
  const cLean = w.get('cLean');
  if (!aLean || !cLean) return notMeasured(id, target, 'aLean or cLean');
  const overLean = 1 / a.aLeanCpuAdvantage.median; // a's CPU per event over aLean's (paired)
  const overC = cLean.aCpuAdvantage.median; // a's events/CPU-s over cLean's (paired)
  const missed = [
    ...(overLean <= 1.5 ? [] : [`${fmt(overLean / 1.5)}x over aLean's 1.5x`]),
    ...(overC >= 1 ? [] : [`${fmt(1 / overC)}x short of cLean`]),
  ];
  const writerExtra = med(a.writerCpuNsPerEvent) - med(aLean.writerCpuNsPerEvent);
  const hashNs = med(w.get('floor')?.hashCpuNsPerEvent);
  const storeExtra = med(a.storeCpuNsPerEvent) - med(aLean.storeCpuNsPerEvent);
  const jobs = w.jobs('a');
  const storeUsPerJob = (med(a.storeCpuNsPerEvent) * w.chunks * 3) / jobs / 1000;
  // Three events per chunk (tokens, key, block): the store's CPU per chunk it dispatched.
  const storeNsPerChunk = med(a.storeCpuNsPerEvent) * 3;
  const passes = a.store.passes ?? Number.NaN;
  return check(
    id,
    target,
    `a / aLean CPU per event ${fmt(overLean)}x, a / cLean events per CPU-second ${fmt(overC)}x; per event a ${perEvent(a)}, aLean ${perEvent(aLean)}; a ${fmt(jobs, 0)} jobs (${fmt(w.chunks / jobs, 1)} chunks each), aLean ${fmt(w.jobs('aLean'), 0)}, for ${w.chunks} chunks`,
    missed.length === 0,
    missed.join(', '),
    Number.isFinite(writerExtra) && Number.isFinite(storeExtra)
      ? `a's writers spent ${fmt(writerExtra, 0)} ns per event more than aLean's: the role calls (handle and claim checks, validation) and the hashing${hashSentence(hashNs, med(aLean.cpuNsPerEvent))}.${roleSentence(w, aLean)} a's store spent ${fmt(storeExtra, 0)} ns per event more: it planned ${fmt(jobs, 0)} jobs of ${fmt(w.chunks / jobs, 1)} chunks in ${fmt(passes, 0)} passes where aLean's made ${fmt(w.jobs('aLean'), 0)}, each a snapshot, windows, pins, a tier offer and a completion: ${fmt(storeUsPerJob, 2)} us of store CPU per job, ${fmt(storeNsPerChunk, 0)} ns per chunk.`
      : `a spent ${ns(a.cpuNsPerEvent)} per event against aLean's ${ns(aLean.cpuNsPerEvent)} (the threads were not measured apart).`,
    [
      "Less role work per publication: each role call reads the caller's handles and values once into private memory and checks every entry (so a hostile or racing caller cannot make it write what it did not check), and publishes with an atomic operation per count; a batch entry for a trusted caller, taking slot and value arrays the role owns, would skip the copy and the per-handle checks. Then jobs without per-chunk objects (the planner builds a job object, a chunk object and two arrays per chunk, and keys as BigInts); fewer, larger jobs when the transfer backend is busy (issue 30, point 3).",
      hashNs > 0.5 * med(aLean.cpuNsPerEvent)
        ? ' The hash stand-in alone costs more than the 1.5x allows over aLean, so a cannot meet this target while its writers hash and aLean is handed its keys: the target would have to count the hashing apart, or aLean do the same hashing.'
        : '',
    ].join(''),
  );
}

/**
 * a's writer role calls alone on one thread (no store, no other thread),
 * against the whole of aLean's CPU per event and the 1.5x budget: when they
 * alone exceed the budget, no store and no cross-thread saving can meet it.
 */
function roleSentence(w: WriterRows, aLean: DesignRow): string {
  const roleNs = med(w.get('a')?.roleCpuNsPerEvent);
  if (!Number.isFinite(roleNs)) return '';
  const budget = 1.5 * med(aLean.cpuNsPerEvent);
  return ` Those role calls alone, on one thread with no store and nothing else running, cost ${fmt(roleNs, 0)} ns per event, ${compare(roleNs, budget, 'less', 'more')} than the ${fmt(budget, 0)} ns per event that 1.5x aLean allows a's writers and store together${roleNs > budget ? ': the role code alone misses the target before any thread is involved' : ''}.`;
}

/** What the hash stand-in alone costs, against the 1.5x budget over aLean (which is handed its keys). */
function hashSentence(hashNs: number, aLeanNs: number): string {
  if (!Number.isFinite(hashNs)) return ' (the hash stand-in was not timed in this run)';
  const budget = 0.5 * aLeanNs;
  return `: the hash stand-in alone, as the hasher role calls it (a chained two-lane mix over a view of the chunk's tokens), cost ${fmt(hashNs, 0)} ns per event, which aLean is handed precomputed, ${compare(hashNs, budget, 'less', 'more')} than the ${fmt(budget, 0)} ns per event the 1.5x allows over aLean's CPU`;
}

/** Issue 30, 3: a's p99 at 50% load no worse than cLean's. */
function latencyAtLoadVsCLean(w: WriterRows): TargetCheck {
  const id = `latency-load-clean-${w.writers}w`;
  const target = `(a) kvoff p99 publication -> dispatch at 50% of the slowest design's capacity no higher than cLean's, ${w.writers} writer(s)`;
  const a = w.get('a')!;
  const cLean = w.get('cLean');
  const x = cLean?.loadLatencyP99OverA?.median;
  if (!cLean || x === undefined) return notMeasured(id, target, 'cLean at load');
  const aLean = w.get('aLean');
  return check(
    id,
    target,
    `a ${fmt(med(a.loadLatencyMsP99), 3)} ms, cLean ${fmt(med(cLean.loadLatencyMsP99), 3)} ms (cLean / a ${fmt(x)}x, paired)${aLean?.loadLatencyMsP99 ? `; aLean ${fmt(med(aLean.loadLatencyMsP99), 3)} ms` : ''}`,
    x >= 1,
    `a's p99 ${fmt(1 / x)}x cLean's`,
    `Both stores are woken once per round by the same doorbell and dispatch what the round made ready. ${storeWorkPerRound(w)}${gcSentence(a, cLean)}${longPassSentence(w, a)}${stealSentence(w)}`,
    gcPausesOf(a) > 0
      ? "No collection during a run: a's threads allocate per chunk (the planner's job and chunk objects, the BigInt keys, the hasher's token view), so a young-generation collection falls in most loaded runs; a job format in preallocated arrays, recycled at the one completion path, would remove it. Then less store work per dispatched round (see full-path-cpu)."
      : "Less store work per pass (see full-path-cpu): a pass that spends a few hundred nanoseconds per chunk runs long enough to be taken off the CPU mid-pass when more threads are runnable than there are cores, where cLean's pass of a microsecond rarely is.",
  );
}

/** Median garbage-collection pauses per loaded run of a design (NaN: not measured). */
function gcPausesOf(r: DesignRow): number {
  return med(r.loadGcPauses);
}

/** The collections that stop a's threads at load, against cLean's (which allocates nothing per event). */
function gcSentence(a: DesignRow, cLean: DesignRow): string {
  const n = gcPausesOf(a);
  if (!Number.isFinite(n)) return '';
  const longest = med(a.loadGcPauseMsMax);
  return ` In a loaded run a's threads stopped for garbage collection ${fmt(n, 1)} times (median of repeats; the longest pause ${fmt(longest, 3)} ms, the p99 chunk waits for one when it falls in its round), cLean's ${fmt(gcPausesOf(cLean), 1)} times.`;
}

/**
 * a's passes over 0.2 ms of wall time in a loaded run, and what work they had:
 * the chunks they dispatched at the run's store CPU per chunk. A long pass
 * with little work was off the CPU most of the time (the OS ran another
 * thread mid-pass), and the chunks of the rounds behind it waited.
 */
function longPassSentence(w: WriterRows, a: DesignRow): string {
  const n = a.loadStore?.longPasses;
  const wallMs = a.loadStore?.longPassWallMs;
  const chunks = a.loadStore?.longPassChunks;
  const maxMs = a.loadStore?.passWallMsMax;
  const cpuMsPerChunk = med(a.loadStoreCpuMs) / w.loadChunks;
  if (n === undefined || wallMs === undefined || chunks === undefined || maxMs === undefined)
    return '';
  if (n === 0) return ` a's store had no pass over 0.2 ms of wall time in a median loaded run.`;
  const workMs = chunks * cpuMsPerChunk;
  // The chunks published while the longest pass ran wait at least until it ends.
  const heldShare = ((maxMs / w.loadRoundMs) * w.d.requests) / w.loadChunks;
  return ` a's store had ${fmt(n, 0)} ${n === 1 ? 'pass' : 'passes'} over 0.2 ms of wall time per loaded run (medians of repeats; the longest ${fmt(maxMs, 2)} ms), together ${fmt(wallMs, 2)} ms for ${fmt(chunks, 0)} chunks, about ${fmt(workMs, 2)} ms of work at the run's ${fmt(cpuMsPerChunk * 1e6, 0)} ns of store CPU per chunk${wallMs > 2 * workMs ? ': most of their time the thread was off the CPU, taken off mid-pass by the OS' : ''}. The longest spans ${fmt(maxMs / w.loadRoundMs, 1)} rounds of publications, whose chunks (${fmt(heldShare * 100, 1)}% of the run's) wait at least until it ends: ${heldShare > 0.01 ? 'more' : 'less'} than the 1% above the p99.`;
}

/** The host's share of the VM's CPU time during the paced runs: stalls no design causes. */
function stealSentence(w: WriterRows): string {
  const share = w.d.loads.find((l) => l.writers === w.writers)?.stealShare;
  if (share === undefined) return '';
  return ` Over the paced runs the host took ${fmt(share * 100, 1)}% of this VM's CPU time (steal), which stops whichever thread it lands on for as long, in every design.`;
}

/** Issue 30, 3: at the maximum rate, a keeps a lower p99 than b and c. */
function latencyAtMaxRate(w: WriterRows): TargetCheck {
  const a = w.get('a')!;
  const rivals = (['b', 'c'] as const).flatMap((n) => (w.get(n) ? [w.get(n)!] : []));
  const missed = rivals.filter((r) => !(r.latencyP99OverA.median > 1));
  const sentence = (r: DesignRow) => {
    const fewer = compare(w.jobs(r.design), w.jobs('a'), 'fewer', 'more');
    const later = r.latencyP99OverA.median > 1 ? 'a higher' : 'a lower or equal';
    return `${r.design}'s store planned ${w.jobsText(r.design)} (${fewer} than a's ${w.jobsText('a')}) and had ${later} p99`;
  };
  return check(
    `latency-max-${w.writers}w`,
    `(a) kvoff p99 publication -> dispatch at the maximum rate lower than b's and c's, ${w.writers} writer(s)`,
    `a ${fmt(med(a.latencyMsP99), 3)} ms, ${rivals.map((r) => `${r.design} ${fmt(med(r.latencyMsP99), 3)} ms (${fmt(r.latencyP99OverA.median)}x a's, paired)`).join(', ')}`,
    rivals.length === 2 && missed.length === 0,
    missed.map((r) => `${r.design}: ${fmt(r.latencyP99OverA.median)}x a's`).join(', '),
    `Jobs per run for ${w.chunks} chunks: ${rivals.map(sentence).join('; ')}.`,
    'Dispatch at once when the transfer backend has capacity (issue 30, point 3).',
  );
}

function notMeasured(id: string, target: string, what: string): TargetCheck {
  return check(
    id,
    target,
    `not measured in this run (${what} missing)`,
    false,
    'not measured',
    'The results file predates this target.',
    'Run the benchmark again.',
  );
}
