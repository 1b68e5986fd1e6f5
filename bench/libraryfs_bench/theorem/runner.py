"""Run the benchmark: plan trials, write the stores under a root (mountpoint or directory), run the scripted
agents through ordinary file reads, and return per-trial records (:class:`TrialRecord`).

Plan: every (content, condition, N, trial) present in the paper's logs (so the comparison is trial by trial,
with the paper's key range), plus ``extra_trials`` trials for each requested (condition, N) the logs lack
(PATH, AUTO, FLAT past 2,000, …). ``large`` adds N = 10⁴, 10⁵ and 10⁶, each on one trial-0 store with
``large_lookups`` targets: PATH, AUTO and the indexed conditions run for real, FLAT runs at 10⁴ and comes
from its closed form (:func:`flat_closed_form_record`) above, reported as such.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from libraryfs_bench.theorem import agents, protocol
from libraryfs_bench.theorem.accounting import (
    CALL_FRAMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TOOL_RESULT_ID_TOKENS,
    Call,
    TrialRecord,
    count_tokens,
    fill_from_trace,
    resent_history_tokens,
    tool_schema_tokens,
)
from libraryfs_bench.theorem.compare import PaperRow, load_paper_rows
from libraryfs_bench.theorem.content import hash_key_low, target_position
from libraryfs_bench.theorem.stores import (
    CONDITIONS,
    PAGE_ITEMS,
    ItemStore,
    PaperStore,
    StoreSpec,
    flat_closed_form,
    render_page,
    write_item_store,
    write_paper_store,
)

DEFAULT_NS = (50, 100, 200, 500, 1000, 2000, 3000, 5000)
LARGE_NS = (10_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class Job:
    """One trial to run: which store, which condition, which target."""

    content: str
    condition: str
    n: int
    trial: int
    key_low: int
    store_trial: int = -1  # store seed when it differs from the trial (large stores: one store, many targets)

    def spec(self) -> StoreSpec:
        """The store this trial reads (seeded as the paper: ``Random(seed)``; PAPERS.md §1)."""
        seed = self.trial if self.store_trial < 0 else self.store_trial
        return StoreSpec(self.content, self.n, seed, self.key_low)


@dataclass
class Plan:
    """Jobs to run, and the closed-form FLAT sizes."""

    jobs: list[Job] = field(default_factory=list)
    flat_closed_form_ns: list[int] = field(default_factory=list)


def make_plan(
    ns: Iterable[int] | None = None,
    conditions: Iterable[str] = CONDITIONS,
    extra_trials: int = 10,
    item_trials: int = 3,
    paper_rows: list[PaperRow] | None = None,
    contents: Iterable[str] = ("hash", "numeric", "encyclopedia"),
    large: bool = False,
    large_lookups: int = 20,
    paper_trials: bool = True,
) -> Plan:
    """Build the plan (see module doc). ``ns`` None means every N in the logs (50 … 5,000).
    ``paper_trials`` False ignores the logged trial sets and runs trials 0..extra_trials-1 everywhere."""
    conditions = list(conditions)
    contents = list(contents)
    rows = load_paper_rows() if paper_rows is None else paper_rows
    wanted_ns = sorted(set(ns)) if ns else None
    jobs: set[Job] = set()
    covered: set[tuple[str, str, int]] = set()
    if paper_trials:
        for r in rows:
            if r.content not in contents or r.condition not in conditions:
                continue
            if wanted_ns is not None and r.n not in wanted_ns:
                continue
            jobs.add(Job(r.content, r.condition, r.n, r.trial, r.key_low))
            covered.add((r.content, r.condition, r.n))
    hash_ns = wanted_ns if wanted_ns is not None else list(DEFAULT_NS)
    for n in hash_ns:
        for cond in conditions:
            if ("hash", cond, n) in covered or "hash" not in contents:
                continue
            count = item_trials if cond in ("PATH", "AUTO") else extra_trials
            for t in range(count):
                jobs.add(Job("hash", cond, n, t, hash_key_low(n)))
    plan = Plan(sorted(jobs, key=lambda j: (j.content, j.n, j.condition, j.trial, j.key_low)))
    if large:
        for n in LARGE_NS:
            for cond in conditions:
                if cond == "FLAT" and n > 10_000:
                    plan.flat_closed_form_ns.append(n)
                    continue
                for t in range(large_lookups):
                    plan.jobs.append(Job("hash", cond, n, t, hash_key_low(n), store_trial=0))
    return plan


def _record(job: Job, num_pages: int, target: tuple, agent: str, via: str) -> TrialRecord:
    return TrialRecord(
        condition=job.condition,
        model=f"scripted:{agent}",
        n=job.n,
        num_pages=num_pages,
        trial=job.trial,
        target_key=target[0],
        target_val=target[1],
        content=job.content,
        agent=agent,
        key_low=job.key_low,
        via=via,
    )


def _target(job: Job, store_items_target: tuple, items_fn: Callable[[], list]) -> tuple:
    if job.store_trial < 0:
        return store_items_target
    return tuple(items_fn()[target_position(job.n, job.trial)])


def flat_closed_form_record(n: int, key_low: int, via: str) -> TrialRecord:
    """FLAT at a size where scanning is impractical: reads = E[target page] = (P+1)/2 and tokens from the
    re-sent-history sum with the mean page size (pages rendered in memory from trial 0's store), not run."""
    spec = StoreSpec("hash", n, 0, key_low)
    items = spec.items()
    sample = [items[i : i + PAGE_ITEMS] for i in range(0, min(len(items), 200 * PAGE_ITEMS), PAGE_ITEMS)]
    page_tokens = sum(count_tokens(render_page(i + 1, p, "hash")) for i, p in enumerate(sample)) / len(sample)
    reads = flat_closed_form(n)
    k = round(reads)
    num_pages = math.ceil(n / PAGE_ITEMS)
    system = protocol.system_prompt("FLAT", num_pages, items[0][0])
    user = protocol.user_message(items[0][0])
    tools = tool_schema_tokens(protocol.TOOLS["FLAT"])
    one = resent_history_tokens(
        system, user, [Call("read_page", {"page_num": num_pages}, "", "page")], tools
    )[0]
    call = count_tokens(Call("read_page", {"page_num": num_pages}, "", "page").call_text())
    call += TOKENS_PER_MESSAGE + CALL_FRAMING_TOKENS
    per_turn_growth = call + page_tokens + TOKENS_PER_MESSAGE + TOOL_RESULT_ID_TOKENS
    total = (k + 1) * one + per_turn_growth * k * (k + 1) / 2
    rec = TrialRecord(
        condition="FLAT",
        model="closed-form",
        n=n,
        num_pages=num_pages,
        trial=-1,
        target_key="",
        target_val="",
        page_reads=k,
        num_turns=k + 1,
        total_tokens=int(total),
        content="hash",
        agent="closed-form",
        key_low=key_low,
        via=via,
        error="closed form: E[reads]=(P+1)/2, not run",
    )
    rec.correct = rec.answered = True
    return rec


@dataclass
class RunStats:
    """Timings of a run (seconds) and files written."""

    build_s: float = 0.0
    index_wait_s: float = 0.0
    agents_s: float = 0.0
    files_written: int = 0


def build_stores(
    root: Path, plan: Plan, stats: RunStats, log: Callable[[str], None] = print
) -> tuple[dict, dict]:
    """Write every store the plan needs under ``root``. Returns (paper stores, item stores) keyed by spec."""
    t0 = time.monotonic()
    paper_specs: dict[StoreSpec, bool] = {}
    item_specs: set[StoreSpec] = set()
    for job in plan.jobs:
        if job.condition in ("PATH", "AUTO"):
            item_specs.add(job.spec())
        else:
            paper_specs[job.spec()] = paper_specs.get(job.spec(), False) or job.condition == "FLAT"
    paper: dict[StoreSpec, PaperStore] = {}
    for spec, flat in sorted(paper_specs.items(), key=lambda kv: (kv[0].n, kv[0].content, kv[0].trial)):
        paper[spec] = write_paper_store(root, spec, flat=flat)
        stats.files_written += paper[spec].files_written
    log(f"  wrote {len(paper)} paper stores ({stats.files_written} files) in {time.monotonic() - t0:.1f} s")
    items: dict[StoreSpec, ItemStore] = {}
    t1 = time.monotonic()
    for spec in sorted(item_specs, key=lambda s: (s.n, s.trial)):
        items[spec] = write_item_store(root, spec, skip_existing=spec.n > 50_000)
        stats.files_written += spec.n
    if items:
        log(
            f"  wrote {len(items)} entry stores ({sum(s.n for s in items)} entries) in {time.monotonic() - t1:.1f} s"
        )
    stats.build_s = time.monotonic() - t0
    return paper, items


def wait_for_index(store: ItemStore, timeout_s: float, probes: int = 8) -> bool:
    """Poll until AUTO's TOC walk reaches the first, last and ``probes`` random entries of ``store`` (the
    mount's indexer renders INDEX.md ~2 s after a change). Returns False on timeout."""
    rng = random.Random(0)
    names = [store.names[0], store.names[-1]] + rng.sample(store.names, min(probes, len(store.names)))
    deadline = time.monotonic() + timeout_s
    while True:
        if all(agents.toc_walk(store.dir, name).answer is not None for name in names):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def run_jobs(plan: Plan, paper: dict, items: dict, via: str) -> list[TrialRecord]:
    """Run every job's scripted agent and account its reads and tokens. Returns records in plan order."""
    records: list[TrialRecord] = []
    tools_tokens = {c: tool_schema_tokens(protocol.TOOLS[c]) for c in CONDITIONS}
    item_cache: dict[StoreSpec, list] = {}
    for job in plan.jobs:
        spec = job.spec()
        start = time.perf_counter()
        if job.condition in ("PATH", "AUTO"):
            store = items[spec]
            target = _target(job, store.target, lambda: item_cache.setdefault(spec, spec.items()))  # noqa: B023 (called within this iteration)
            name = store.name_of(target[0])
            agent_name = "path-lookup" if job.condition == "PATH" else "toc-walk"
            trace = (
                agents.path_lookup(store.dir, name)
                if job.condition == "PATH"
                else agents.toc_walk(store.dir, name)
            )
            rec = _record(job, job.n, target, agent_name, via)
            rec.max_fanout = max((c.args.get("fanout", 0) for c in trace.calls), default=0)
        else:
            pstore = paper[spec]
            target = _target(job, pstore.target, lambda: item_cache.setdefault(spec, spec.items()))  # noqa: B023 (called within this iteration)
            fn = agents.PAPER_AGENTS[job.condition]
            trace = fn(pstore, target[0], job.condition)
            rec = _record(job, pstore.num_pages, target, fn.__name__.replace("_", "-"), via)
            rec.target_page = (
                pstore.flat_target_page if job.condition == "FLAT" else pstore.sorted_target_page
            )
        system = protocol.system_prompt(job.condition, rec.num_pages, target[0])
        fill_from_trace(rec, trace, system, protocol.user_message(target[0]), tools_tokens[job.condition])
        rec.wall_time_s = time.perf_counter() - start
        records.append(rec)
    return records


def run_plan(
    root: Path,
    plan: Plan,
    via: str,
    toc_writer: Callable[[Path], object] | None = None,
    index_timeout_s: float = 120.0,
    log: Callable[[str], None] = print,
) -> tuple[list[TrialRecord], RunStats]:
    """Build stores, get item stores indexed (``toc_writer`` on a plain directory; waiting for the mount's
    indexer otherwise), run the agents, add closed-form FLAT rows. Raises RuntimeError when the mount's
    indexer has not covered a store within ``index_timeout_s`` (+1 s per 1,000 entries)."""
    stats = RunStats()
    paper, items = build_stores(root, plan, stats, log)
    t0 = time.monotonic()
    needs_toc = {j.spec() for j in plan.jobs if j.condition == "AUTO"}
    for spec in sorted(needs_toc, key=lambda s: (s.n, s.trial)):
        store = items[spec]
        if toc_writer is not None:
            toc_writer(store.dir)
        elif not wait_for_index(store, index_timeout_s + spec.n / 1000):
            raise RuntimeError(
                f"the mount's INDEX.md for {store.dir} did not cover its {spec.n} entries in time"
            )
    stats.index_wait_s = time.monotonic() - t0
    if needs_toc:
        log(f"  TOCs ready for {len(needs_toc)} AUTO stores in {stats.index_wait_s:.1f} s")
    t1 = time.monotonic()
    records = run_jobs(plan, paper, items, via)
    for n in plan.flat_closed_form_ns:
        records.append(flat_closed_form_record(n, hash_key_low(n), via))
    stats.agents_s = time.monotonic() - t1
    log(f"  ran {len(records)} trials in {stats.agents_s:.1f} s")
    return records, stats


def run_jobs_llm(
    plan: Plan,
    paper: dict,
    items: dict,
    client: object,
    model: str,
    via: str,
    max_turns: int = protocol.MAX_TURNS,
    log: Callable[[str], None] = print,
) -> list[TrialRecord]:
    """Run every job with the LLM agent (:func:`libraryfs_bench.theorem.llm_agent.run_llm_trial`) instead of
    the scripted agents. Closed-form sizes are skipped (an LLM cannot scan 10⁵ pages)."""
    from libraryfs_bench.theorem.llm_agent import run_llm_trial

    records = []
    item_cache: dict[StoreSpec, list] = {}
    for i, job in enumerate(plan.jobs, 1):
        spec = job.spec()
        store = items[spec] if job.condition in ("PATH", "AUTO") else paper[spec]
        target = _target(job, store.target, lambda: item_cache.setdefault(spec, spec.items()))  # noqa: B023 (called within this iteration)
        rec = run_llm_trial(
            client,
            model,
            job.condition,
            store,
            target,
            job.n,
            job.trial,  # type: ignore[arg-type]
            job.content,
            job.key_low,
            max_turns=max_turns,
        )
        rec.via = via
        if isinstance(store, PaperStore):
            rec.target_page = store.flat_target_page if job.condition == "FLAT" else store.sorted_target_page
        records.append(rec)
        if i % 25 == 0 or i == len(plan.jobs):
            log(f"  llm trials {i}/{len(plan.jobs)}")
    return records
