"""Real input from Debian packages: the GCIDE English dictionary and the Python documentation sources.

* :func:`gcide_entries` — headword → its first definition sentence, from ``dict-gcide``
  (``/usr/share/dictd/gcide.index`` + ``gcide.dict.dz``; dictd's index gives base64 offsets/lengths).
* :data:`PYTHON_DOC_SOURCES` — the reStructuredText sources shipped by ``python3-doc`` (~500 documents).

Used by ``libraryfs demo`` and by the Library Theorem benchmark (encyclopedia content).
"""

from __future__ import annotations

import glob
import gzip
import os
import random
import re
from collections.abc import Iterator

GCIDE_INDEX = "/usr/share/dictd/gcide.index"
GCIDE_DICT = "/usr/share/dictd/gcide.dict.dz"
PYTHON_DOC_SOURCES = next(
    iter(sorted(glob.glob("/usr/share/doc/python3*-doc/html/_sources"))),
    "/usr/share/doc/python3-doc/html/_sources",
)

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_WORD = re.compile(r"^[A-Za-z][a-z]{2,19}$")
_BRACES = re.compile(r"[{}]")
_PRON = re.compile(r"\\[^\\]*\\")


def _b64(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def gcide_available() -> bool:
    """Whether the dictionary files are installed (``apt-get install dict-gcide``)."""
    return os.path.exists(GCIDE_INDEX) and os.path.exists(GCIDE_DICT)


def _definition(block: str) -> str | None:
    """First definition sentence of a dictd entry block (numbered sense 1, else the first text line)."""
    lines = block.splitlines()[1:]
    text: list[str] = []
    for ln in lines:
        s = ln.strip()
        if not s:
            if text:
                break
            continue
        if s.startswith("[") and s.endswith("]"):
            if text:
                break
            continue
        if re.match(r"^\d+\.\s", s):
            if text:
                break
            s = re.sub(r"^\d+\.\s*", "", s)
        elif re.match(r"^(Syn|Note|Usage|Etym):", s):
            break
        if not text and (s.startswith("fr.") or s.endswith("]") and "[" not in s):
            continue  # etymology continuation lines
        text.append(s)
    if not text:
        return None
    body = _PRON.sub("", " ".join(text))
    body = _BRACES.sub("", body)
    body = re.sub(r"--[A-Z][\w. ]*$", "", body).strip()
    body = re.sub(r"^\d+\s+", "", body)
    sent = re.split(r"(?<=[.;])\s", body, maxsplit=1)[0].strip()
    if len(sent) < 12 or "?" in sent[:3]:
        return None
    return sent.rstrip(";") + ("" if sent.endswith(".") else ".")


def gcide_entries(limit: int | None = None, seed: int = 0) -> list[tuple[str, str]]:
    """``(headword, first definition sentence)`` pairs: plain alphabetic headwords, one per spelling.

    With ``limit``, a deterministic random sample (``random.Random(seed)``) in alphabetical order.
    Raises ``FileNotFoundError`` if dict-gcide is not installed.
    """
    with open(GCIDE_INDEX, encoding="utf-8", errors="replace") as f:
        index = [ln.rstrip("\n").split("\t") for ln in f]
    cands: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    for parts in index:
        if len(parts) < 3:
            continue
        w = parts[0]
        if not _WORD.match(w) or w.lower() in seen:
            continue
        seen.add(w.lower())
        cands.append((w, _b64(parts[1]), _b64(parts[2])))
    if limit is not None:
        rng = random.Random(seed)
        cands = rng.sample(cands, min(len(cands), limit * 2))
    data = gzip.open(GCIDE_DICT).read()
    out: list[tuple[str, str]] = []
    for w, off, ln in sorted(cands, key=lambda c: c[0].lower()):
        d = _definition(data[off : off + ln].decode("utf-8", "replace"))
        if d and d.rstrip(".").lower() != w.lower() and len(d.split()) >= 3:
            out.append((w, d))
    if limit is not None and len(out) > limit:
        keep = set(random.Random(seed + 1).sample(range(len(out)), limit))
        out = [e for k, e in enumerate(out) if k in keep]
    return out


def iter_python_docs() -> Iterator[str]:
    """Paths of the python3-doc reStructuredText sources (``*.rst.txt``)."""
    yield from sorted(glob.glob(os.path.join(PYTHON_DOC_SOURCES, "**", "*.txt"), recursive=True))
