"""Build the query sets (JSON lines in ``data/``) from sources independent of the TOCs and summariser.

``python -m libraryfs_bench.findability.queries`` regenerates them (deterministic: fixed seeds, sorted
inputs). Each line: ``{"id", "corpus", "kind", "query", "targets", "source", "split"}``. ``targets`` are
library-relative paths; one ending in ``/`` accepts any entry below it. ``split`` is ``heldout`` for the
30% of ids whose SHA-256 falls below 0.3 (by the id alone, so a regenerated set keeps every query's side),
else ``dev``. Tune on ``dev`` only; the held-out figures are for reporting.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import tempfile
from collections import defaultdict

from . import corpora
from .qsources import commit_subjects, python_symbols, sphinx_inventory, stdlib_synopses, wordnet_glosses
from .text import STOPWORDS, stem

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
HELDOUT_FRACTION = 0.3
SEED = 13


def split_of(qid: str) -> str:
    """``heldout`` or ``dev`` by the SHA-256 of the query id (30% held out)."""
    h = int.from_bytes(hashlib.sha256(qid.encode()).digest()[:8], "big") / 2**64
    return "heldout" if h < HELDOUT_FRACTION else "dev"


def make_query(corpus: str, kind: str, query: str, targets: list[str], source: str) -> dict:
    """One query record; the id is a digest of (corpus, kind, query) so it is stable across runs."""
    digest = hashlib.sha1(f"{corpus}\0{kind}\0{query}".encode()).hexdigest()[:10]
    qid = f"{corpus}-{kind}-{digest}"
    return {
        "id": qid,
        "corpus": corpus,
        "kind": kind,
        "query": query,
        "targets": sorted(targets),
        "source": source,
        "split": split_of(qid),
    }


def _sample(rows: list, n: int, rng: random.Random) -> list:
    return rows if len(rows) <= n else rng.sample(rows, n)


def _strip_words(text: str, banned: set[str]) -> str:
    """Remove every word whose lower-case form or stem is banned (the answer's own name) and URLs."""
    text = re.sub(r"<?https?://\S+>?", " ", text)
    out = []
    for w in text.split():
        core = re.sub(r"[^A-Za-z0-9_.]", "", w).lower().strip(".")
        parts = set(re.split(r"[._]", core)) | {core}
        if any(p and (p in banned or stem(p) in banned) for p in parts):
            continue
        out.append(w)
    return " ".join(out).strip(" ,;:-")


def _content_words(text: str) -> int:
    return sum(1 for w in re.findall(r"[a-z]+", text.lower()) if w not in STOPWORDS and len(w) > 2)


NAME_ROLES = {
    "py:function": 60,
    "py:method": 60,
    "py:class": 40,
    "py:module": 30,
    "py:exception": 20,
    "py:data": 20,
    "py:attribute": 20,
    "c:function": 30,
}


def python_queries() -> list[dict]:
    """Known names from ``objects.inv``; topics from stdlib module docstrings' first sentences (module name removed)."""
    src = corpora.python_docs_dir()
    have = {
        os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/") for d, _, fs in os.walk(src) for f in fs
    }
    inv = sphinx_inventory()
    rng = random.Random(SEED)
    by_role: dict[str, dict[str, str]] = defaultdict(dict)
    for o in inv:
        rel = f"{o.docname}.rst.txt"
        if o.role in NAME_ROLES and rel in have and o.name not in by_role[o.role]:
            by_role[o.role][o.name] = rel
    out = []
    for role, n in NAME_ROLES.items():
        for name in _sample(sorted(by_role[role]), n, rng):
            out.append(
                make_query(
                    "python",
                    "name",
                    name,
                    [f"{corpora.PYTHON_SECTION}/{by_role[role][name]}"],
                    f"objects.inv {role}",
                )
            )
    modules = {name: rel for name, rel in by_role["py:module"].items() if rel.startswith("library/")}
    syn = stdlib_synopses(sorted(modules))
    topics = []
    for mod, line in sorted(syn.items()):
        banned = set(re.split(r"[._]", mod.lower())) | {mod.lower()}
        q = _strip_words(line, banned | {stem(b) for b in banned})
        if _content_words(q) >= 3 and len(q) <= 200:
            topics.append(
                make_query(
                    "python",
                    "topic",
                    q,
                    [f"{corpora.PYTHON_SECTION}/{modules[mod]}"],
                    "stdlib module docstring, first sentence",
                )
            )
    return out + _sample(topics, 250, rng)


def gcide_queries() -> list[dict]:
    """Known names: headwords of the sample; topics: WordNet glosses of the same words (word removed)."""
    entries = corpora.gcide_entries()
    rng = random.Random(SEED)
    words = sorted(w for w, _ in entries)
    out = [
        make_query("gcide", "name", w, [corpora.gcide_path(w)], "dict-gcide headword")
        for w in _sample(words, 250, rng)
    ]
    glosses = wordnet_glosses({w.lower() for w in words})
    topics = []
    for w in words:
        got = glosses.get(w.lower())
        if not got:
            continue
        pos, gloss = got
        low = w.lower()
        banned = {low, stem(low), low[: max(4, len(low) - 3)]}
        q = " ".join(
            t
            for t in gloss.split()
            if not re.sub(r"[^a-z]", "", t.lower()).startswith(tuple(b for b in banned if len(b) >= 4))
            and re.sub(r"[^a-z]", "", t.lower()) != low
        )
        if _content_words(q) >= 2:
            topics.append(
                make_query("gcide", "topic", q, [corpora.gcide_path(w)], f"WordNet 3.0 gloss ({pos})")
            )
    return out + _sample(topics, 250, rng)


_ISSUE_REF = re.compile(r"\s*\((?:#|fixes #|closes #)\d+\)|\s*\b(?:fix(?:es)?|closes?)\s+#\d+", re.I)
_CHORE = re.compile(
    r"^(?:release|bump|merge|update changelog|changelog|version|prepare|start version|"
    r"update requirements|pre-commit|\[pre-commit)",
    re.I,
)


def code_queries(corpus: str = "code", *, topic_prefix: str = "", max_topics: int = 250) -> list[dict]:
    """Known names: unique qualnames of a repository at its pinned commit; topics: commit subjects (split
    into ``;`` clauses, issue references and chores dropped) → the ``.py`` files those commits touched
    (commits touching 1–6 such files, under ``topic_prefix`` when given). Targets are file directories
    ``code/<name>/<path>/`` (any entry of the file counts)."""
    locate, commit, cname = corpora.CODE_CORPORA[corpus]
    repo = locate()
    rng = random.Random(SEED)
    base = f"code/{cname}"
    with tempfile.TemporaryDirectory() as tmp:
        corpora.export_commit(repo, commit, tmp)
        syms = python_symbols(tmp)
        files = {
            os.path.relpath(os.path.join(d, f), tmp).replace(os.sep, "/")
            for d, ds, fs in os.walk(tmp)
            for f in fs
            if f.endswith(".py")
        }
    count: dict[str, int] = defaultdict(int)
    for s in syms:
        count[s.qualname] += 1
    names = [
        s
        for s in syms
        if count[s.qualname] == 1
        and not s.path.startswith(("tests/", "docs/", "examples/"))
        and len(s.qualname.rsplit(".", 1)[-1]) >= 4
        and not s.qualname.rsplit(".", 1)[-1].startswith("__")
    ]
    out = []
    for kind, n in (("function", 110), ("class", 50), ("method", 110)):
        pool = sorted((s for s in names if s.kind == kind), key=lambda s: (s.path, s.qualname))
        for s in _sample(pool, n, rng):
            out.append(
                make_query(corpus, "name", s.qualname, [f"{base}/{s.path}/"], f"ast {kind} at {commit[:7]}")
            )
    topics = []
    for sha, subject, touched in commit_subjects(repo, commit):
        py = sorted(p for p in touched if p in files and p.startswith(topic_prefix))
        if not 1 <= len(py) <= 6 or _CHORE.match(subject):
            continue
        for clause in (_ISSUE_REF.sub("", c).strip(" .") for c in subject.split(";")):
            if _content_words(clause) >= 2:
                topics.append(
                    make_query(
                        corpus, "topic", clause, [f"{base}/{p}/" for p in py], f"commit subject {sha[:7]}"
                    )
                )
    return out + _sample(topics, max_topics, rng)


BUILDERS = {
    "python": python_queries,
    "gcide": gcide_queries,
    "code": code_queries,
    "click": lambda: code_queries("click", topic_prefix="src/click/"),
}


def query_file(corpus: str) -> str:
    """Path of a corpus's shipped query set."""
    return os.path.join(DATA_DIR, f"{corpus}.jsonl")


def load_queries(path: str) -> list[dict]:
    """Read a JSONL query set. Raises ``ValueError`` naming the line of a malformed record."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            q = json.loads(line)
            if not isinstance(q, dict) or not {"id", "kind", "query", "targets"} <= set(q):
                raise ValueError(f"{path}:{n}: a query needs id, kind, query and targets")
            q.setdefault("split", split_of(q["id"]))
            out.append(q)
    return out


def main(argv: list[str] | None = None) -> int:
    """Regenerate ``data/<corpus>.jsonl`` for the corpora named (default: all)."""
    names = (argv if argv is not None else sys.argv[1:]) or list(BUILDERS)
    if names[0] in ("-h", "--help") or not set(names) <= set(BUILDERS):
        print(
            f"usage: python -m libraryfs_bench.findability.queries [{' | '.join(BUILDERS)} …]\n{main.__doc__}"
        )
        return 0 if names[0] in ("-h", "--help") else 2
    os.makedirs(DATA_DIR, exist_ok=True)
    for name in names:
        qs = BUILDERS[name]()
        seen: set[str] = set()
        with open(query_file(name), "w", encoding="utf-8") as f:
            for q in qs:
                if q["id"] not in seen:
                    seen.add(q["id"])
                    f.write(json.dumps(q, ensure_ascii=False) + "\n")
        kinds: dict[tuple[str, str], int] = defaultdict(int)
        for q in qs:
            kinds[(q["kind"], q["split"])] += 1
        print(
            f"{name}: {len(seen)} queries " + ", ".join(f"{k}/{s} {n}" for (k, s), n in sorted(kinds.items()))
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
