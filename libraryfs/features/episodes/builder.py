"""Turning ``episodes/<id>/steps.jsonl`` into units (the ``units`` DB) and anchor views (files).

The builder is incremental: the episode's meta remembers how many bytes of ``steps.jsonl`` were consumed
and the :class:`~libraryfs.features.episodes.units.EpisodeState` after the last unit, so an append costs only the
new lines. Only complete lines (ending in ``\\n``) are consumed; a line that is not a JSON object is
skipped and recorded in the meta's ``errors`` (the last 20). A ``steps.jsonl`` shorter than what was
consumed (truncated or replaced) triggers a full rebuild.

One writer per library: every method that writes units or views (:meth:`EpisodeBuilder.append`,
:meth:`~EpisodeBuilder.build`, :meth:`~EpisodeBuilder.clear`, :meth:`~EpisodeBuilder.answer_asks`,
:meth:`~EpisodeBuilder.poll`) holds ``<libdir>/episodes.lock`` (:func:`libraryfs.layout.view_writer`) for
its whole run and reads the episode's meta under it, so ``libraryfs episode build``, ``episode watch`` and
the indexer's hook never build the same steps or write the same files at once.

Question files (the shell route to recall and answers): an agent writes a question into
``episodes/<id>/ask/<name>`` (optionally a first line ``budget: N``); :meth:`EpisodeBuilder.answer_asks` —
run by ``libraryfs episode watch`` and ``build`` — writes the packed evidence to
``episodes/<id>/recall/<name>.md`` and the answer read from that evidence alone to
``episodes/<id>/answer/<name>.md`` (``<name>`` without a ``.md``/``.txt`` suffix), and rewrites both
whenever the question or the episode changes. An episode built by an older version of the unit format
(its stored state has another version) is rebuilt from its first line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from libraryfs.features.episodes.index import stored_line
from libraryfs.features.episodes.unitdb import UnitDB, check_episode_id
from libraryfs.features.episodes.units import STATE_VERSION, EpisodeState, Unit, check_step, unit_from_line
from libraryfs.features.episodes.views import ViewWriter
from libraryfs.fs.store import Store
from libraryfs.fs.tree import DirTree, Tree
from libraryfs.layout import view_writer

log = logging.getLogger(__name__)

EPISODES_DIR = "episodes"
VIEW = "episodes"  #: name of the derived view's writer lock (``<libdir>/episodes.lock``)
STEPS_FILE = "steps.jsonl"
DEFAULT_ASK_BUDGET_TOKENS = 200


def episode_root(ep: str) -> str:
    """Library-relative directory of an episode: ``episodes/<id>``."""
    check_episode_id(ep)
    return f"{EPISODES_DIR}/{ep}"


def _store_path(rel: str) -> bytes:
    return b"/" + os.fsencode(rel.strip("/"))


def file_size(tree: Tree, rel: str) -> int | None:
    """Size in bytes of a regular file in ``tree``, or None when missing."""
    if isinstance(tree, DirTree):
        try:
            return os.stat(tree._p(rel)).st_size
        except FileNotFoundError:
            return None
    view = getattr(tree, "view", None)
    if view is not None:
        try:
            return int(view.getattr(_store_path(rel))["st_size"])
        except Exception:  # noqa: BLE001 - the store's NotFound and friends
            return None
    return len(tree.read_bytes(rel)) if tree.exists(rel) else None


def read_from(tree: Tree, rel: str, offset: int) -> bytes:
    """Bytes of ``rel`` from ``offset`` to its end (without reading the part before ``offset``)."""
    if isinstance(tree, DirTree):
        with open(tree._p(rel), "rb") as f:
            f.seek(offset)
            return f.read()
    view = getattr(tree, "view", None)
    if view is not None:
        fh, _ = view.open(_store_path(rel), os.O_RDONLY)
        try:
            out = bytearray()
            while chunk := view.read(fh, 1 << 20, offset + len(out)):
                out += chunk
            return bytes(out)
        finally:
            view.release(fh)
    return tree.read_bytes(rel)[offset:]


@dataclass
class BuildReport:
    """What one :meth:`EpisodeBuilder.build` did."""

    episode: str
    new_units: int = 0
    units: int = 0
    files_written: int = 0
    errors: list[str] = field(default_factory=list)
    rebuilt: bool = False
    seconds: float = 0.0

    def line(self) -> str:
        """One human-readable line."""
        s = (
            f"{self.episode}: +{self.new_units} units ({self.units} in all), {self.files_written} view files "
            f"written in {self.seconds:.2f} s"
        )
        if self.rebuilt:
            s += " (full rebuild)"
        if self.errors:
            s += f"; {len(self.errors)} bad lines (first: {self.errors[0]})"
        return s


class EpisodeBuilder:
    """Builds units and views of episodes in one library.

    ``tree`` is where views are written (the mountpoint when mounted — :func:`libraryfs.fs.tree.open_tree`);
    ``store`` holds the ``units`` DB; ``extractor(t, text) -> Unit | None`` turns free-text steps into units
    (the LLM, :func:`libraryfs.features.episodes.llm.make_extractor`), None for deterministic extraction only;
    ``llm_reader`` answers ``ask/`` questions the deterministic reader cannot (None: rules only).
    """

    def __init__(
        self,
        tree: Tree,
        store: Store,
        extractor: Callable[[int, str], Unit | None] | None = None,
        llm_reader: Any = None,
    ):
        self.tree = tree
        self.store = store
        self.db = UnitDB(store)
        self.extractor = extractor
        self.llm_reader = llm_reader  #: :class:`~libraryfs.features.episodes.answer.LLMReader` or None
        self._index_cache: dict[str, tuple[int, Any]] = {}
        self._held = 0  # depth of nested writing() calls of this builder

    @contextlib.contextmanager
    def writing(self, wait: bool = True) -> Iterator[bool]:
        """Hold the library's episodes writer lock (re-entrant within this builder). Yields False only with
        ``wait=False`` when another writer holds it."""
        if self._held:
            self._held += 1
            try:
                yield True
            finally:
                self._held -= 1
            return
        with view_writer(self.store.libdir, VIEW, wait=wait) as got:
            if not got:
                yield False
                return
            self._held = 1
            try:
                yield True
            finally:
                self._held = 0

    # -- write -------------------------------------------------------------------------------------------
    def append(self, ep: str, record: str | dict) -> BuildReport:
        """Append one step (a JSON object or its text) to ``steps.jsonl`` and build it into a unit.

        Raises ``ValueError`` when the record is not a JSON object, or is one the build would refuse
        (:func:`~libraryfs.features.episodes.units.check_step`: ``t`` not an integer, a field of the wrong
        shape); nothing is written then.
        """
        rec = json.loads(record) if isinstance(record, str) else record
        if not isinstance(rec, dict):
            raise ValueError("a step must be a JSON object")
        check_step(rec)
        line = json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self.writing():
            self.tree.append_bytes(f"{episode_root(ep)}/{STEPS_FILE}", line.encode())
            return self.build(ep)

    def build(self, ep: str, rebuild: bool = False) -> BuildReport:
        """Consume the new complete lines of ``episodes/<ep>/steps.jsonl``: units into the store, views
        into the tree. ``rebuild`` drops the units and views first. Raises ``FileNotFoundError`` when the
        episode has no ``steps.jsonl``."""
        with self.writing():
            return self._build(ep, rebuild)

    def _build(self, ep: str, rebuild: bool) -> BuildReport:
        t0 = time.monotonic()
        root = episode_root(ep)
        rel = f"{root}/{STEPS_FILE}"
        size = file_size(self.tree, rel)
        if size is None:
            raise FileNotFoundError(f"{rel} does not exist")
        meta = self.db.meta(ep)
        report = BuildReport(ep)
        stale = bool(meta) and (meta.get("state") or {}).get("version") != STATE_VERSION
        if rebuild or stale or size < meta.get("consumed_bytes", 0):
            self.clear(ep)
            meta, report.rebuilt = {}, True
        consumed = int(meta.get("consumed_bytes", 0))
        data = read_from(self.tree, rel, consumed)
        end = data.rfind(b"\n") + 1
        state = EpisodeState.from_json(meta.get("state"))
        writer = ViewWriter(self.tree, root)
        units: list[Unit] = []
        errors: list[str] = list(meta.get("errors", []))
        start_lines: dict[tuple[str, int], str] = {}
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict):
                    raise ValueError("a step must be a JSON object")
                rec.setdefault("t", state.next_t)
                u = unit_from_line(rec, self.extractor)
            except ValueError as e:
                report.errors.append(str(e)[:160])
                continue
            before = {k: (lab, state.visit_start.get(k, -1), state.visits.get(k, {}).get(lab, 0))
                      for k, lab in state.labels.items()}  # fmt: skip
            state.mark(u)
            units.append(u)
            writer.unit(u)
            self._visit_views(ep, writer, u, before, start_lines)
        n_units = int(meta.get("units", 0)) + len(units)
        meta = {
            "state": state.to_json(),
            "consumed_bytes": consumed + end,
            "units": n_units,
            "errors": (errors + report.errors)[-20:],
            "built_ns": time.time_ns(),
            "asks": meta.get("asks", {}),
        }
        self.db.put(ep, units, meta)
        if units:
            writer.overview(ep, n_units, meta["state"], state.next_t - 1)
        report.new_units, report.units, report.files_written = len(units), n_units, writer.files_written
        report.seconds = time.monotonic() - t0
        return report

    def _visit_views(
        self, ep: str, writer: ViewWriter, u: Unit, before: dict, start_lines: dict[tuple[str, int], str]
    ) -> None:
        """Visit views for the label kinds whose visit begins at ``u``: the previous visit of that kind
        ends at the step before, the new one starts."""
        for kind, k in u.marks.get("visit", {}).items():
            start_lines[(kind, u.t)] = stored_line(u)
            if kind in before:
                lab, start, prev_k = before[kind]
                line = start_lines.get((kind, start)) or self._line_of(ep, start)
                writer.visit(lab, prev_k, start, u.t - 1, line)
            writer.visit(u.locations[kind], k, u.t, None, stored_line(u))

    def _line_of(self, ep: str, t: int) -> str:
        us = self.db.units(ep, t, t)
        return stored_line(us[0]) if us else f"t={t}"

    def clear(self, ep: str) -> None:
        """Drop the episode's units and every generated view (``steps.jsonl`` and ``ask/`` stay)."""
        with self.writing():
            self._clear(ep)

    def _clear(self, ep: str) -> None:
        root = episode_root(ep)
        self.db.drop(ep)
        for name in (
            "steps",
            "timeline",
            "by-location",
            "by-object",
            "by-event",
            "visits",
            "transitions",
            "vitals",
            "recall",
            "answer",
            "episode.md",
        ):
            self.tree.remove(f"{root}/{name}")

    def episodes(self) -> list[str]:
        """Episode ids: directories under ``episodes/`` holding a ``steps.jsonl``."""
        if not self.tree.isdir(EPISODES_DIR):
            return []
        return [
            n
            for n in self.tree.listdir(EPISODES_DIR)
            if not n.startswith(".") and self.tree.exists(f"{EPISODES_DIR}/{n}/{STEPS_FILE}")
        ]

    # -- read ---------------------------------------------------------------------------------------------
    def index(self, ep: str) -> Any:
        """The :class:`~libraryfs.features.episodes.index.EpisodeIndex` of an episode (cached per unit count)."""
        from libraryfs.features.episodes.index import EpisodeIndex

        n = int(self.db.meta(ep).get("units", 0))
        hit = self._index_cache.get(ep)
        if hit and hit[0] == n:
            return hit[1]
        idx = EpisodeIndex(self.db.units(ep))
        self._index_cache[ep] = (n, idx)
        return idx

    def answer_asks(self, ep: str) -> list[str]:
        """Answer new or changed question files in ``ask/``; returns the ``recall/`` and ``answer/`` paths
        written."""
        with self.writing():
            return self._answer_asks(ep)

    def _answer_asks(self, ep: str) -> list[str]:
        ask_dir = f"{episode_root(ep)}/ask"
        if not self.tree.isdir(ask_dir):
            return []
        meta = self.db.meta(ep)
        asks: dict[str, str] = dict(meta.get("asks", {}))
        written = []
        for name in self.tree.listdir(ask_dir):
            if name.startswith(".") or name.endswith(".tmp"):
                continue
            try:
                text = self.tree.read_bytes(f"{ask_dir}/{name}").decode("utf-8", "replace")
            except (IsADirectoryError, FileNotFoundError):
                continue
            budget, question = parse_ask(text)
            if not question:
                continue
            stem = name[:-3] if name.endswith(".md") else name[:-4] if name.endswith(".txt") else name
            outs = (f"{episode_root(ep)}/recall/{stem}.md", f"{episode_root(ep)}/answer/{stem}.md")
            key = hashlib.sha256(f"{budget}\0{question}\0{meta.get('units', 0)}".encode()).hexdigest()[:16]
            if asks.get(name) == key and all(self.tree.exists(o) for o in outs):
                continue
            for path, body in zip(outs, self._ask_bodies(ep, question, budget), strict=True):
                self.tree.write_bytes(path, body.encode())
                written.append(path)
            asks[name] = key
        if written:
            meta = self.db.meta(ep)
            meta["asks"] = asks
            self.db.put(ep, [], meta)
        return written

    def _ask_bodies(self, ep: str, question: str, budget: int) -> tuple[str, str]:
        """The ``recall/`` and ``answer/`` file texts of one question."""
        from libraryfs.features.episodes.answer import answer

        a = answer(self.index(ep), question, budget, "auto", self.llm_reader)
        r = a.recall
        recall_md = (
            f"# recall: {question}\n\nbudget {budget} tokens · evidence {r.tokens} tokens · "
            f"{len(r.items)} lines · anchors: {r.anchor_summary()}\n\n{r.text}\n"
        )
        notes = "".join(f"note: {n}\n" for n in a.notes)
        answer_md = (
            f"# answer: {question}\n\nanswer: {a.answer if a.answer is not None else 'unknown'}\n"
            f"reader: {a.reader}\nevidence: {r.tokens} tokens in {len(r.items)} lines (budget {budget}), "
            f"steps {', '.join(str(t) for t in r.steps()[:12])}\n{notes}"
        )
        return recall_md, answer_md

    def poll(self, wait: bool = True) -> list[str] | None:
        """One watcher pass over every episode: build grown ``steps.jsonl`` files, answer questions.
        Returns report lines for what changed; None (nothing done) when ``wait=False`` and another writer
        holds the library's episodes lock."""
        with self.writing(wait) as got:
            return self._poll() if got else None

    def _poll(self) -> list[str]:
        out = []
        for ep in self.episodes():
            try:
                size = file_size(self.tree, f"{episode_root(ep)}/{STEPS_FILE}")
                if size is not None and size != self.db.meta(ep).get("consumed_bytes", 0):
                    rep = self.build(ep)
                    if rep.new_units or rep.errors or rep.rebuilt:
                        out.append(rep.line())
                out += [f"{ep}: wrote {p}" for p in self.answer_asks(ep)]
            except (OSError, ValueError) as e:
                log.warning("episode %s: %s", ep, e)
                out.append(f"{ep}: error: {e}")
        return out


def parse_ask(text: str) -> tuple[int, str]:
    """``(budget_tokens, question)`` of a question file (first line ``budget: N`` optional)."""
    lines = text.strip().splitlines()
    budget = DEFAULT_ASK_BUDGET_TOKENS
    if lines and lines[0].lower().startswith("budget:"):
        try:
            budget = max(1, int(lines[0].split(":", 1)[1].strip()))
        except ValueError:
            pass
        lines = lines[1:]
    return budget, " ".join(x.strip() for x in lines).strip()
