"""First half of the question parser: normalisation and tagging (second half: :mod:`.anchors`).

A question is lower-cased and rewritten into a token list in which every recognised phrase is one
placeholder token carrying its meaning (:class:`Tagged`):

========  =============================================================================================
``§lN``   a location label of the episode ("zone-1-2", "lake shore")
``§eN``   an event ("collected wood", "my wood collection", "drank water", "the death")
``§iN``   an inventory item; ``§vN`` a vital (``thirst``/``hunger``/``fatigue`` are inverted)
``§cN``   a vital state change on its own ("got thirsty" = drink dropped)
``§up``   / ``§down``  words of change (went up, rose, gained ... / went down, fell, spent ...)
``§offN`` a temporal offset ("3 steps after", "right before", "the step after", "2 steps later")
``§rN``   a step range ("between step 10 and 90", "from t=10 to 90", "before step 300", "after step 5")
``§sN``   a step ("at step 412", "t=412", "step 412:")
``§oK``   an ordinal (``§o2`` second/2nd, ``§oL`` last/latest/most recent/final, ``§oN`` next)
``§order`` a which-came-first cue; ``§endstep``/``§beginstep`` "last/final step of", "first step of";
          ``§begin`` ("d steps into" a visit), ``,`` a clause break
========  =============================================================================================

Numbers in words become digits where they count steps or times ("two steps" → "2 steps").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from libraryfs.features.episodes import lexicon as L

_B = r"(?<![\w§])"  # word start (placeholders count as words)
_E = r"(?![\w])"
_NUM_WORDS = "|".join(sorted(L.NUMBER_WORDS, key=lambda w: (-len(w), w)))
_ORD_WORDS = "|".join(sorted(L.ORDINAL_WORDS, key=lambda w: (-len(w), w)))
_STEPWORD = r"(?:time ?steps?|steps?|t|timesteps?|turns?)"
_STEPS = r"(?:time ?steps?|timesteps?|steps?|turns?|moves)"


@dataclass
class Tagged:
    """A tagged question: ``tokens`` and the meaning of each placeholder in ``meta``."""

    tokens: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    order_cue: bool | str = False  #: True: which came first; "later": which came later


class _Text:
    """The question being rewritten, with the meaning of each placeholder inserted so far."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.meta: dict[str, Any] = {}
        self.n = 0

    def put(self, tag: str, info: Any) -> str:
        """Record ``info`` as the meaning of a new placeholder ``§<tag><n>``; returns it padded with spaces
        for insertion."""
        key = f"§{tag}{self.n}"
        self.n += 1
        self.meta[key] = info
        return f" {key} "

    def sub(self, pattern: str, tag: str, fn: Any) -> None:
        """Replace every match of ``pattern`` by a placeholder whose meaning is ``fn(match)``."""

        def rep(m: re.Match) -> str:
            """The placeholder for match ``m`` (:func:`re.sub` replacement), or the match unchanged when
            ``fn`` gives None."""
            info = fn(m)
            return m.group(0) if info is None else self.put(tag, info)

        self.s = _sub(pattern, rep, self.s)

    def longest(self, patterns: list[tuple[str, Any]], tag: str) -> None:
        """Replace the longest non-overlapping matches among ``(pattern, meaning)`` pairs — every pattern is
        tried at every word start; ties go to the earlier match, then the pattern order (never to how
        names hash)."""
        starts = [m.start() for m in re.finditer(r"(?<![\w§])[\w§]", self.s)]
        found = []
        for i, (pat, info) in enumerate(patterns):
            need = _needles(pat)
            if need is not None and not any(n in self.s for n in need):
                continue  # cannot match anywhere: not compiled (most of a question's cost, issue 18)
            rx = _compiled(pat)
            for st in starts:
                m = rx.match(self.s, st)
                if m:
                    found.append((-(m.end() - st), st, i, m.end(), info))
        found.sort(key=lambda x: x[:3])
        taken: list[tuple[int, int]] = []
        chosen = []
        for _neg, start, _i, end, info in found:
            if any(start < b and a < end for a, b in taken):
                continue
            taken.append((start, end))
            chosen.append((start, end, info))
        for start, end, info in sorted(chosen, reverse=True):
            self.s = self.s[:start] + self.put(tag, info) + self.s[end:]


@functools.lru_cache(maxsize=4096)
def _compiled(pat: str) -> re.Pattern:
    return re.compile(pat + _E)


_META = frozenset(".^$*+?{}[]()|\\")


@functools.lru_cache(maxsize=4096)
def _needles(pat: str) -> tuple[str, ...] | None:
    """Literal strings of which every match of regular expression ``pat`` contains at least one (each
    top-level alternative's literal prefix), or None when ``pat`` is not of the simple form read here
    (alternatives of escaped literals, a non-capturing group of them, anything after the prefix). Checking
    them is a substring test; compiling ``pat`` costs ~0.5 ms (the ~100 vocabulary patterns of a question
    were most of ``parse_question``'s time in a fresh process)."""
    out: list[str] = []
    for alt in _split_top(pat):
        alt = _skip_zero_width(alt)
        if alt is None:
            return None
        if alt.startswith("(?:") or (alt.startswith("(") and not alt.startswith("(?")):
            end = _group_end(alt, 0)
            if end is None or alt[end + 1 : end + 2] in ("?", "*", "{"):
                return None  # an optional group: its literals need not occur
            inner = _needles(alt[3 if alt.startswith("(?:") else 1 : end])
            if inner is None:
                return None
            out += inner
            continue
        lit = _literal_prefix(alt)
        if not lit:
            return None
        out.append(lit)
    return tuple(out) if out else None


def _sub(pattern: str, repl: Any, s: str) -> str:
    """``re.sub(pattern, repl, s)``, without compiling ``pattern`` when none of its :func:`_needles` occurs
    in ``s`` (then it cannot match, and ``re.sub`` would return ``s`` unchanged)."""
    need = _needles(pattern)
    if need is not None and not any(n in s for n in need):
        return s
    return re.sub(pattern, repl, s)


def _skip_zero_width(alt: str | None) -> str | None:
    """``alt`` without what can match the empty string at its start — zero-width assertions (``\\b``, ``^``,
    lookarounds) and groups quantified by ``?``, ``*`` or ``{0,…}`` (``(?:the )?``): what follows them
    still has to match —, or None for an unbalanced group."""
    while alt:
        if alt.startswith(("\\b", "\\B", "\\A")):
            alt = alt[2:]
        elif alt.startswith("^"):
            alt = alt[1:]
        elif alt.startswith(("(?=", "(?!", "(?<=", "(?<!")):
            end = _group_end(alt, 0)
            if end is None:
                return None
            alt = alt[end + 1 :]
        elif alt.startswith("("):
            end = _group_end(alt, 0)
            if end is None:
                return None
            n = _optional_quantifier(alt, end + 1)
            if not n:
                break
            alt = alt[end + 1 + n :]
        else:
            break
    return alt


def _optional_quantifier(pat: str, i: int) -> int:
    """Length of the quantifier at ``pat[i]`` when it allows zero repetitions (``?``, ``*``, ``{0,…}``,
    ``{,…}``, with a lazy ``?`` or possessive ``+`` after it), else 0."""
    if pat[i : i + 1] in ("?", "*"):
        n = 1
    elif pat.startswith(("{0", "{,"), i):
        close = pat.find("}", i)
        if close < 0:
            return 0
        n = close + 1 - i
    else:
        return 0
    return n + 1 if pat[i + n : i + n + 1] in ("?", "+") else n


#: one step of :func:`_structure`'s scan: an escape, a whole character class (``[``, an optional ``^``, an
#: optional literal ``]``, then up to the first unescaped ``]``; possessive: a class that does not close
#: is not closed earlier by giving the ``]`` back), a ``[`` that never closes (group 1), or a structural
#: character (group 2); everything else is skipped
_STRUCTURE_STEP = re.compile(r"\\.|\[\^?+\]?+(?:\\.|[^\]\\])*+\]|(\[)|([()|])", re.DOTALL)


def _structure(pat: str, i: int = 0) -> Iterator[tuple[int, str | None]]:
    """``(index, character)`` of ``pat``'s characters from ``i`` that give it structure — ``(``, ``)`` and
    ``|`` neither escaped nor inside a character class; ``(index, None)`` last when a class does not close.
    (One :data:`_STRUCTURE_STEP` match per escape, class or structural character: the
    literals between them are skipped in C, which made computing the needles of a question's ~250 patterns
    half of ``parse_question``'s time when it walked the patterns a character at a time.)"""
    for m in _STRUCTURE_STEP.finditer(pat, i):
        g = m.lastindex  # None: an escape or a whole class
        if g == 2:
            j = m.start()
            yield j, pat[j]
        elif g == 1:
            yield m.start(), None
            return


_ATOM = re.compile(r"\\.|\[\^?+\]?+(?:\\.|[^\]\\])*+\]", re.DOTALL)  #: an escape or a whole class
_INNERMOST_GROUP = re.compile(r"\([^()]*\)")


def _blank(m: re.Match) -> str:
    """As many ``_`` as ``m`` matched (keeps every index of the pattern where it was)."""
    return "_" * (m.end() - m.start())


def _split_top(pat: str) -> list[str | None]:
    """``pat`` split at its top-level ``|`` (outside groups and character classes); ``[None]`` when its
    brackets do not balance. (In C: escapes and classes, then innermost groups until none is left, are
    blanked out of a copy of the same length; the ``|`` left are the top-level ones.)"""
    masked = _ATOM.sub(_blank, pat)
    if "[" in masked:  # a class that does not close
        return [None]
    while "(" in masked:
        masked, n = _INNERMOST_GROUP.subn(_blank, masked)
        if not n:
            return [None]
    if ")" in masked:
        return [None]
    parts, start = [], 0
    i = masked.find("|")
    while i >= 0:
        parts.append(pat[start:i])
        start = i + 1
        i = masked.find("|", start)
    parts.append(pat[start:])
    return parts


def _group_end(pat: str, i: int) -> int | None:
    """Index of the ``)`` closing the group opened at ``pat[i]``, or None."""
    depth = 0
    for j, c in _structure(pat, i):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        elif c is None:
            return None
    return None


def _literal_prefix(alt: str) -> str:
    """The characters every match of ``alt`` begins with: its leading literals (``\\`` + punctuation is a
    literal; a class, group, anchor or ``\\w``-like escape ends it; a literal made optional by the
    quantifier after it is dropped)."""
    out: list[str] = []
    i = 0
    while i < len(alt):
        c = alt[i]
        if c == "\\":
            if i + 1 >= len(alt) or alt[i + 1].isalnum() or alt[i + 1] == "_":
                break
            out.append(alt[i + 1])
            i += 2
        elif c in _META:
            if c in "?*{" and out:
                out.pop()
            break
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _prenormalise(q: str) -> str:
    s = " " + q.lower() + " "
    s = s.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    s = _sub(r"[\u2013\u2014]", " - ", s)
    s = _sub(r"(\d),(\d{3})\b", r"\1\2", s)
    s = _sub(r"\bt\s*=\s*(\d+)", r" step \1 ", s)
    s = _sub(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]", r" \1 to \2 ", s)
    s = _sub(
        rf"\bthe ({_ORD_WORDS}) (?=(?:time ?step|timestep|step|turn) (?:after|before|following|prior|preceding)\b)",
        lambda m: f"the {L.ORDINAL_WORDS[m.group(1)]}th ",
        s,
    )
    s = _sub(
        r"\bthe (\d+)(?:st|nd|rd|th) (?:time ?step|timestep|step|turn) (after|before|following|prior to|preceding)\b",
        r" \1 steps \2 ",
        s,
    )
    s = _sub(
        r"\bthe (\d+)(?:st|nd|rd|th) and (?:the )?(\d+)(?:st|nd|rd|th) (?:time ?steps?|timesteps?|steps?|turns?)\b",
        r" step \1 and step \2 ",
        s,
    )
    s = _sub(r"\bthe (\d+)(?:st|nd|rd|th) (?:time ?step|timestep|step|turn)\b", r" step \1 ", s)
    s = _sub(r"\b(?:time|timestep|time step|step|steps)\s*#\s*(\d+)", r" step \1 ", s)
    s = _sub(r"#\s*of\b", " number of ", s)
    s = _sub(r"#\s*(\d+)", r" number \1 ", s)
    s = _sub(r"(?<![\w-])(\d+)\s*-\s*(\d+)(?![\w-])", r"\1 to \2", s)
    s = _sub(r"[?!()\[\]{}\"*]|\.(?!\d)", " ", s).replace(";", " , ")
    s = _sub(r"\s+-\s+|\s+-$|^-\s+", " , ", s)
    s = s.replace(",", " , ").replace(":", " , ")
    s = _sub(
        rf"\b({_NUM_WORDS})(?=\s+(?:more\s+)?(?:time ?steps?|timesteps?|steps?|times?|visits?|turns?)\b)",
        lambda m: str(L.NUMBER_WORDS[m.group(1)]),
        s,
    )
    s = _sub(r"\ba (?:single )?step\b", "1 step", s)
    s = _sub(r"\btwice\b", "2 times", s)
    s = _sub(r"\bend(?:ed|s)? up (?:at|in)\b", " arrive at ", s)
    return _sub(r"\s+", " ", s)


def _label_patterns(labels: list[str]) -> list[tuple[str, Any]]:
    out = []
    for lab in sorted(labels, key=lambda x: (-len(x), x)):
        words = [w for w in re.split(r"[\s_-]+", lab.lower()) if w]
        if not words:
            continue
        out.append(
            ("(?:the )?" + r"[ _-]?".join(re.escape(w) for w in words) + r"(?: area| region| zone)?", lab)
        )
    return out


def _offsets(t: _Text) -> None:
    after = r"(?:later|afterwards?|after|following|past|on from|since|into)"
    before = r"(?:earlier|beforehand|before|prior to|prior|ahead of|preceding|previously|back)"
    adv = r"(?:right |just |immediately |directly |exactly )"

    def dsteps(sign: int):
        """A match → ``(sign × steps, counted into a visit)`` meaning for an offset of ``sign`` direction (1
        after, -1 before)."""

        def f(m: re.Match) -> tuple[int, bool]:
            """``(signed offset in steps, whether the phrase ends with "into")`` from the match's step
            count."""
            return sign * int(m.group(1)), m.group(0).rstrip().endswith("into")

        return f

    t.sub(rf"\b(\d+) (?:more )?{_STEPS} {adv}?{after}\b", "off", dsteps(1))
    t.sub(rf"\b(\d+) (?:more )?{_STEPS} {adv}?{before}\b", "off", dsteps(-1))
    t.sub(
        rf"\b(?:the )?(?:very )?(?:step|moment|turn) {adv}?(?:after|following)\b", "off", lambda m: (1, False)
    )
    t.sub(
        rf"\b(?:the )?(?:very )?(?:step|moment|turn) {adv}?(?:before|prior to|preceding)\b",
        "off",
        lambda m: (-1, False),
    )
    t.sub(r"\bafter (\d+) (?:more )?steps\b", "off", lambda m: (int(m.group(1)), False))
    t.sub(r"\b(?:right|just|immediately|directly) (?:after|following)\b", "off", lambda m: (1, False))
    t.sub(
        r"\b(?:right|just|immediately|directly) (?:before|prior to|preceding)\b", "off", lambda m: (-1, False)
    )
    t.sub(r"\b(?:the )?(?:next|following|subsequent) step\b", "off", lambda m: (1, False))
    t.sub(r"\b(?:the )?(?:previous|preceding|prior) step\b", "off", lambda m: (-1, False))
    for key, info in list(t.meta.items()):  # "d steps into my visit": the visit's beginning
        if key.startswith("§off") and info[1]:
            t.s = t.s.replace(f" {key} ", f" {key} §begin ")


def _ranges(t: _Text) -> None:
    sw = rf"(?:{_STEPWORD} )?"
    t.sub(rf"\bbetween {sw}(\d+) and {sw}(\d+)\b", "r", lambda m: (int(m.group(1)), int(m.group(2))))
    t.sub(
        rf"\b(?:from|in the span from|starting at) {sw}(\d+) (?:to|through|thru|till|until|up to|and) {sw}(\d+)\b",
        "r",
        lambda m: (int(m.group(1)), int(m.group(2))),
    )
    t.sub(
        rf"\b(?:in |within |during |over |across )?(?:the )?{_STEPWORD} (\d+) (?:to|through|thru|till|until) {sw}(\d+)\b",
        "r",
        lambda m: (int(m.group(1)), int(m.group(2))),
    )
    t.sub(
        rf"\b(?:in |within |during |over |across )?(?:the )?(?:window|span|interval|range|period|stretch)(?: of)? {sw}(\d+)"
        rf" (?:to|through|thru|till|until|and) {sw}(\d+)\b",
        "r",
        lambda m: (int(m.group(1)), int(m.group(2))),
    )
    t.sub(r"\b(?:within|in|during) the first (\d+) steps\b", "r", lambda m: (0, int(m.group(1)) - 1))
    t.sub(
        rf"\b(?:once |after |when )?{_STEPWORD} (\d+) (?:had |has |was )?(?:passed|gone by|elapsed|over|done)\b",
        "r",
        lambda m: (int(m.group(1)) + 1, None),
    )
    t.sub(
        rf"\b(?:before|prior to|until|till|earlier than|preceding|ahead of) (?:reaching |getting to |hitting |arriving at )?"
        rf"(?:the )?{_STEPWORD} (\d+)\b",
        "r",
        lambda m: (None, int(m.group(1)) - 1),
    )
    t.sub(rf"\b(?:up to|by|through|up until) {_STEPWORD} (\d+)\b", "r", lambda m: (None, int(m.group(1))))
    t.sub(rf"\bfrom {_STEPWORD} (\d+) (?:on|onwards|onward)\b", "r", lambda m: (int(m.group(1)), None))
    t.sub(
        rf"\b(?:after|since|following|later than|beyond|past) {_STEPWORD} (\d+)\b",
        "r",
        lambda m: (int(m.group(1)) + 1, None),
    )
    t.sub(
        r"\b(?:(?:at|on|in|during|for|of) )?(?:the )?(?:time ?step|step|timestep|time|moment|turn) (?:number )?(\d+)\b",
        "s",
        lambda m: int(m.group(1)),
    )
    t.sub(
        r"\b(\d+) (?:to|through|thru|till|until) (\d+)\b", "r", lambda m: (int(m.group(1)), int(m.group(2)))
    )


def _cues(t: _Text) -> bool | str:
    """Order cues and visit-edge cues; returns whether the question asks which came first (``True``) or
    which came later (``"later"``)."""
    order: bool | str = False
    later = (
        r"\b(?:came|come|comes|happened|happen|happens|occurred|occur|occurs|was|were|took place) "
        r"(?:later|last|second|after the other)\b|\bwhich (?:one |of (?:the|these|them) (?:two )?)?(?:was |is |came |"
        r"happened )?(?:later|last)\b(?! (?:time|§))"
    )
    if re.search(later, t.s):
        t.s = _sub(later, " §order ", t.s)
        order = "later"
    pats = [
        r"\b(?:came|come|comes|happened|happen|happens|occurred|occur|occurs|was|were|took place)"
        r" (?:first|earlier|sooner|before the other)\b",
        r"\bwhich (?:one |event |of (?:the|these|them) (?:two )?)?(?:was |is |came |happened )?(?:first|earlier|sooner)\b",
        r"\bfirst(?= ?,? (?:or|vs|versus)\b| ?,? ?$)",
        r"\b(?:before|earlier than|sooner than) the other\b",
        r"\b(?:earlier|sooner)\b",
        r"\bwhich (?:one |of (?:the|these|them) (?:two )?)?(?:did i|i) (?:do|did|complete|achieve|accomplish|manage)"
        r" (?:first|earlier|sooner)\b",
    ]
    for p in pats:
        if re.search(p, t.s):
            order = order or True
            t.s = _sub(p, " §order ", t.s)
    t.s = _sub(r"\b(?:vs|versus)\b", " or ", t.s)
    t.s = _sub(
        r"\b(?:the )?(?:very )?(?:last|final|ending|closing) (?:step|one|moment|point)"
        r"(?=s? (?:of|at|in|inside|i|there|before|when|during|on)\b)",
        " §endstep ",
        t.s,
    )
    t.s = _sub(
        r"\b(?:the )?(?:very )?(?:first|opening|starting|start) (?:step|one|moment|point)(?= (?:of|at|in|inside|on)\b)",
        " §beginstep ",
        t.s,
    )
    t.s = _sub(r"\b(?:the )?start of\b", " §beginstep ", t.s)
    t.s = _sub(r"\b(?:the )?end of\b", " §endstep ", t.s)
    return order


def _ordinals(t: _Text) -> None:
    t.s = _sub(r"\b(\d+)(?:st|nd|rd|th)\b", lambda m: f" §o{int(m.group(1))} ", t.s)
    t.s = _sub(r"\b(?:most recent(?:ly)?|very last|latest|last(?:ly)?|final(?:ly)?|previous)\b", " §oL ", t.s)
    t.s = _sub(r"\b(?:very first|initial(?:ly)?|earliest)\b", " §o1 ", t.s)
    t.s = _sub(rf"\b({_ORD_WORDS})\b", lambda m: f" §o{L.ORDINAL_WORDS[m.group(1)]} ", t.s)
    t.s = _sub(r"\bsubsequent(?:ly)? to\b", " after ", t.s)
    t.s = _sub(r"\b(?:next|subsequent)\b", " §oN ", t.s)
    t.s = _sub(
        r"\b(visit|stay|trip)(?: number)? (\d+)\b(?! steps?)", lambda m: f" {m.group(1)} §o{m.group(2)} ", t.s
    )
    t.s = _sub(r"\bthe (?:following|subsequent) (?=§[ec])", " the §oN ", t.s)
    t.s = _sub(r"(§[ecl]\d+)\s+(?:number|no)\s+(\d+)\b", lambda m: f"{m.group(1)} §o{m.group(2)} ", t.s)


def _directions(t: _Text) -> None:
    t.s = _sub(r"\b(went|go|goes|gone|going|came|come|comes|got|get|gets) back (up|down)\b", r"\1 \2", t.s)
    for words, tag in (
        (L.UP_VERBS, "§up"),
        (L.DOWN_VERBS, "§down"),
        (L.UP_NOUNS, "§up"),
        (L.DOWN_NOUNS, "§down"),
    ):
        pat = _B + L._alts(list(words)) + _E
        t.s = _sub(pat, f" {tag} ", t.s)


def tag(question: str, vocab: dict[str, list[str]]) -> Tagged:
    """The tagged form of ``question`` given the episode's ``vocab`` (see :class:`Tagged`)."""
    t = _Text(_prenormalise(question))
    t.s = _sub(
        r"\b(?:(?:get|got|gotten|getting|came|come|comes|coming|went|go|goes|going|made it|make it|return|returned"
        r"|returning|returns|wandered|headed|head|travelled|traveled|showed up|show up|shows up|turned up)"
        r"(?: back)?(?: to| into| inside| in| at)|(?:set foot|sets foot|setting foot) (?:in|into|on|at)"
        r"|(?:walked|walk|moved|move|stepped|step) (?:back )?(?:into|inside)|re-?entered|re-?enter)\b"
        r"(?! an end| the end| a close)",
        " arrive at ",
        t.s,
    )
    labels = vocab.get("labels", [])
    t.longest(_label_patterns(labels), "l")
    events = sorted(set(vocab.get("events", [])) | set(L.CRAFTER_EVENTS))
    items_all = tuple(sorted(set(vocab.get("items", [])) | set(L.CRAFTER_ITEMS)))
    t.longest([(p, e) for e in events for p in L.event_patterns(e, items_all)], "e")
    _offsets(t)
    _ranges(t)
    order = _cues(t)
    _ordinals(t)
    t.longest([(L._alts(L.item_words(i)), i) for i in items_all], "i")
    t.s = _sub(r"(§[ic]\d+)\s+(?:count|total|number)\b", r"\1 amount", t.s)
    t.s = _sub(r"\b(?:inv|inventory|item) count\b", "inventory amount", t.s)
    vitals = sorted(set(vocab.get("vitals", [])) | set(L.VITAL_NAMES))
    vpats: list[tuple[str, Any]] = [
        (L._alts([v]) + "(?: level| meter| stat| value| bar| points)?", (v, False)) for v in vitals
    ]
    vpats += [
        (re.escape(w) + "(?: level| meter| stat| value| bar| points)?", info)
        for w, info in L.VITAL_WORDS.items()
    ]
    t.sub(
        _B
        + r"(?:got|get|gets|became|become|becomes|grew|felt|feel|was|were|went) (?:more |a bit |very |really )?"
        + L._alts(list(L.VITAL_STATES))
        + _E,
        "c",
        lambda m: L.VITAL_STATES[m.group(0).split()[-1]][::-1],
    )
    t.longest(vpats, "v")
    _directions(t)
    tokens = t.s.split()
    return Tagged(tokens, t.meta, order)
