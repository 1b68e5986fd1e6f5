"""T-step compounding: the experiment the paper only proved (Θ(T²) flat history vs O(T log T) library).

T successive steps. Step t needs the note written by an earlier step d(t) = ``Random(t).randrange(t)``
(note 0 is the seed), derives a key from that note's value, looks the key up in an item store (one PATH
read, the same for both agents), and writes its own note ``notes/n<t>`` that later steps may need. So the
reasoning state grows by one note per step.

* **flat history** — the agent's state is its context: step t re-sends every earlier step's messages
  (task, lookup call and result, note) plus its own; cost per step grows with t, cumulative Θ(T²).
* **library** — the state is files: step t starts from an empty context, walks ``notes/INDEX.md`` to note
  d(t) (⌈log_b t⌉ TOC pages ≤ C tokens), reads it, looks up, writes its note; cumulative O(T log T).
  Through a mount, a note younger than the indexer's latency (~2 s) is not in INDEX.md yet: the agent then
  opens it by its known path and the step is counted in ``direct_opens``.

Both agents must reach the same final value (checked). Tokens use the re-sent-history model of
:mod:`libraryfs_bench.theorem.accounting`; exponents are least-squares slopes of log(cumulative) on log(t).
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from libraryfs_bench.theorem import agents
from libraryfs_bench.theorem.accounting import Call, count_tokens, resent_history_tokens
from libraryfs_bench.theorem.stores import ItemStore

SYSTEM = (
    "You are a reasoning agent working through a long task one step at a time. Each step names an "
    "earlier note; take its value, look up the derived key in the store, and write a note with the result."
)


def dependency(t: int) -> int:
    """The earlier step whose note step ``t`` (≥ 1) needs: ``Random(t).randrange(t)``."""
    return random.Random(t).randrange(t)


def derived_index(value: str, t: int, n: int) -> int:
    """Store position step ``t`` looks up, derived from the needed note's value (stable hash)."""
    digest = hashlib.blake2b(f"{value}|{t}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n


def note_text(t: int, key: str, value: str) -> str:
    """Body of note ``t``: the key it looked up and the value found (``value=`` is what later steps use)."""
    return f"note {t}: looked up key {key} and found {value}. value={value}\n"


def note_value(text: str) -> str:
    """The ``value=`` field of a note."""
    return text.rsplit("value=", 1)[1].strip()


def note_value_or_none(text: str) -> str | None:
    """The ``value=`` field of a note's text, None when it has none."""
    return note_value(text) if "value=" in text else None


@dataclass
class CompoundingResult:
    """Per-step and cumulative tokens of both agents, fitted exponents and bookkeeping."""

    steps: int
    checkpoints: list[int] = field(default_factory=list)
    flat_cumulative: list[int] = field(default_factory=list)
    library_cumulative: list[int] = field(default_factory=list)
    library_toc_reads: list[int] = field(default_factory=list)  # per step
    direct_opens: int = 0
    flat_exponent: float = 0.0
    library_exponent: float = 0.0
    final_value_flat: str = ""
    final_value_library: str = ""
    max_toc_tokens: int = 0

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return dict(self.__dict__)


def fit_exponent(ts: list[int], values: list[int]) -> float:
    """Least-squares slope of log(values) against log(ts) (values > 0)."""
    xs = [math.log(t) for t in ts]
    ys = [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False)) / den if den else 0.0


def _checkpoints(steps: int) -> list[int]:
    points = sorted(
        {int(round(10 ** (k / 4))) for k in range(0, 4 * int(math.log10(max(steps, 1))) + 1)} | {steps}
    )
    return [p for p in points if 1 <= p <= steps]


def _settle(notes: Path, newest: str, timeout_s: float) -> bool:
    """Wait until a TOC walk of ``notes`` reaches ``newest`` (the mount's indexer caught up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        trace = agents.toc_walk(notes, newest, answer_of=note_value_or_none)
        if trace.answer is not None and not trace.error:
            return True
        time.sleep(0.25)
    return False


def run_compounding(
    root: str | Path,
    store: ItemStore,
    steps: int = 1000,
    toc_writer: Callable[[Path], object] | None = None,
    run_name: str = "run",
    settle_every: int = 100,
    settle_timeout_s: float = 30.0,
) -> CompoundingResult:
    """Run both agents for ``steps`` steps with notes under ``<root>/theorem-compounding/<run_name>/notes``.

    ``toc_writer`` re-renders the notes directory's TOC after each note on a plain directory (None: a
    mounted library's indexer does it; then at steps 1, 2, 4, … and every ``settle_every`` steps the run
    waits until INDEX.md
    reaches the newest note, so only notes younger than that are opened by path). Raises RuntimeError
    when the two agents' final values differ.
    """
    notes = Path(root) / "theorem-compounding" / run_name / "notes"
    notes.mkdir(parents=True, exist_ok=True)
    for old in notes.iterdir():
        if old.is_file() and old.name.startswith("n"):
            old.unlink()
    user0 = "Step 0: write the seed note."
    seed_value = store.target[1]
    (notes / "n00000").write_text(note_text(0, "seed", str(seed_value)), encoding="utf-8")
    if toc_writer:
        toc_writer(notes)
    res = CompoundingResult(steps=steps)
    marks = set(_checkpoints(steps))
    flat_values = {0: str(seed_value)}
    flat_history = count_tokens(user0) + count_tokens(note_text(0, "seed", str(seed_value))) + 6
    flat_total = lib_total = 0
    last_flat = last_lib = ""
    for t in range(1, steps + 1):
        d = dependency(t)
        task = f"Step {t}: use note {d}."
        # ---- library agent: state in files, fresh context each step
        # the note's value: from the note read, or from its line when the TOC quotes its whole text
        trace = agents.toc_walk(notes, f"n{d:05d}", answer_of=note_value_or_none)
        value = trace.answer
        if value is None or trace.error:  # not indexed yet (mount latency): open the known path
            res.direct_opens += 1
            trace = agents.path_lookup(notes, f"n{d:05d}")
            value = note_value(trace.calls[-1].result)
        calls = [c for c in trace.calls if c.kind != "submit"]
        res.library_toc_reads.append(sum(1 for c in calls if c.kind == "toc"))
        res.max_toc_tokens = max(
            [res.max_toc_tokens] + [count_tokens(c.result) for c in calls if c.kind == "toc"]
        )
        key = store.names[derived_index(value, t, len(store.names))]
        lookup = agents.path_lookup(store.dir, key)
        found = lookup.calls[0].result.split("→", 1)[1].strip()
        text = note_text(t, key, found)
        (notes / f"n{t:05d}").write_text(text, encoding="utf-8")
        if toc_writer:
            toc_writer(notes)
        elif settle_every and (t % settle_every == 0 or (t < settle_every and t & (t - 1) == 0)):
            _settle(notes, f"n{t:05d}", settle_timeout_s)
        step_calls = calls + [lookup.calls[0], Call("write_note", {"text": text}, "ok", "note")]
        lib_total += sum(resent_history_tokens(SYSTEM, task, step_calls))
        last_lib = found
        # ---- flat agent: state is the re-sent history
        fvalue = flat_values[d]
        fkey = store.names[derived_index(fvalue, t, len(store.names))]
        flookup = agents.path_lookup(store.dir, fkey)
        ffound = flookup.calls[0].result.split("→", 1)[1].strip()
        flat_values[t] = ffound
        fcalls = [flookup.calls[0], Call("write_note", {"text": note_text(t, fkey, ffound)}, "ok", "note")]
        per_turn = resent_history_tokens(SYSTEM, task, fcalls)
        flat_total += sum(per_turn) + flat_history * len(per_turn)
        flat_history += count_tokens(task) + sum(
            count_tokens(c.call_text()) + count_tokens(c.result) + 6 for c in fcalls
        )
        last_flat = ffound
        if t in marks:
            res.checkpoints.append(t)
            res.flat_cumulative.append(flat_total)
            res.library_cumulative.append(lib_total)
    res.final_value_flat, res.final_value_library = last_flat, last_lib
    if last_flat != last_lib:
        raise RuntimeError(f"flat and library agents disagree at step {steps}: {last_flat} vs {last_lib}")
    fit = [
        (t, f, lib)
        for t, f, lib in zip(res.checkpoints, res.flat_cumulative, res.library_cumulative, strict=False)
        if t >= max(10, steps // 10)
    ]
    if len(fit) >= 2:
        res.flat_exponent = fit_exponent([x[0] for x in fit], [x[1] for x in fit])
        res.library_exponent = fit_exponent([x[0] for x in fit], [x[2] for x in fit])
    return res
