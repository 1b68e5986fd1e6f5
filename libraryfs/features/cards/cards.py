"""Knowledge cards: file format, tree layout and the deterministic block selection (KACE, PAPERS.md §2).

A card is a Markdown file with a small typed header between ``---`` lines::

    ---
    type: lemma                      # lemma | invariant | decomposition | verification
    tier: medium                     # medium | hard | universal   (easy reads no cards)
    domain: combinatorics            # a domain slug, or "universal"
    provenance: champ:C_comb_sum, trace:P_Combinatorics_1
    uses: 0                          # solver attempts' traces that read it  (REFINE re-scores these)
    helped: 0                        # ... of which the problem was solved
    hurt: 0                          # ... of which it was not
    ---
    # Sum rule

    If a set splits into disjoint cases, count each case and add.

Layout inside a library (library-relative paths)::

    cards/<tier>/<domain>/<id>.md     tier ∈ {medium, hard}
    cards/universal/<id>.md           visible from every block that reads cards
    cards/attic/<tier>/<domain>/<id>.md   demoted by REFINE: never read by the solver
    cards/AUDIT.jsonl                 one JSON line per ADD/REFINE change

The set of cards a block (tier, domain) reads is :func:`block_paths` — a pure function of the tree's
listing, never a model choice: easy → none; medium/hard/fallback → the ``*.md`` files of
``cards/<tier>/<domain>/`` (fallback uses the hard block) followed by those of ``cards/universal/``, each
sorted by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from libraryfs.fs.generated import INDEX_FILE
from libraryfs.fs.tree import Tree

ROOT = "cards"
UNIVERSAL = "universal"
ATTIC = "attic"
AUDIT_PATH = f"{ROOT}/AUDIT.jsonl"
#: Solver tiers, in escalation order (the fallback is a pool, see controller.py).
TIERS = ("easy", "medium", "hard", "fallback")
#: Tiers that own a card directory.
CARD_TIERS = ("medium", "hard")
CARD_TYPES = ("lemma", "invariant", "decomposition", "verification")
#: Domains of the coarse classifier (classify.py); other slugs are allowed in the tree.
DOMAINS = ("algebra", "combinatorics", "geometry", "number-theory", "inequality", "polynomial", "sequence")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_INT_FIELDS = ("uses", "helped", "hurt")


class CardFormatError(ValueError):
    """A card file whose header is missing, malformed or has an out-of-range field."""


def slug(text: str, max_len: int = 48) -> str:
    """A lowercase ``[a-z0-9-]`` slug of ``text`` (``"Number-Theory"`` → ``"number-theory"``)."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:max_len].strip("-")
    return s or "x"


def check_slug(value: str, what: str) -> str:
    """Return ``value`` if it is a valid path-component slug, else raise :class:`CardFormatError`."""
    if not _SLUG.match(value):
        raise CardFormatError(f"{what} must be a slug [a-z0-9-], got {value!r}")
    return value


@dataclasses.dataclass
class Card:
    """One knowledge card. ``tier`` is ``medium``/``hard`` or ``universal`` (then ``domain`` is too)."""

    id: str
    type: str
    tier: str
    domain: str
    title: str
    body: str
    provenance: list[str] = dataclasses.field(default_factory=list)
    uses: int = 0
    helped: int = 0
    hurt: int = 0

    def __post_init__(self) -> None:
        """Check ``type`` and ``tier``; raises :class:`CardFormatError` naming the bad value."""
        if self.type not in CARD_TYPES:
            raise CardFormatError(f"card type must be one of {CARD_TYPES}, got {self.type!r}")
        if self.tier not in CARD_TIERS + (UNIVERSAL,):
            raise CardFormatError(f"card tier must be medium, hard or universal, got {self.tier!r}")
        if (self.tier == UNIVERSAL) != (self.domain == UNIVERSAL):
            raise CardFormatError("a universal card has tier and domain 'universal' (and only it)")
        check_slug(self.id, "card id")
        check_slug(self.domain, "domain")

    @property
    def path(self) -> str:
        """Library-relative path of the card in the live tree."""
        return card_path(self.tier, self.domain, self.id)

    def render(self) -> str:
        """The card file's text (header + ``# title`` + body), UTF-8 Markdown."""
        head = [
            "---",
            f"type: {self.type}",
            f"tier: {self.tier}",
            f"domain: {self.domain}",
            f"provenance: {', '.join(self.provenance)}",
            f"uses: {self.uses}",
            f"helped: {self.helped}",
            f"hurt: {self.hurt}",
            "---",
            "",
            f"# {self.title}",
            "",
            self.body.strip(),
            "",
        ]
        return "\n".join(head)


def new_card_id(title: str, body: str) -> str:
    """A stable id for new content: slug of the title + 6 hex digits of the body's SHA-256."""
    return f"{slug(title, 40)}-{hashlib.sha256(body.strip().encode()).hexdigest()[:6]}"


def parse_card(text: str, card_id: str) -> Card:
    """Parse a card file's text. Raises :class:`CardFormatError` on a bad header or field."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise CardFormatError("card must start with a '---' header line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise CardFormatError("card header is not closed by '---'") from None
    fields: dict[str, str] = {}
    for ln in lines[1:end]:
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        key, sep, value = ln.partition(":")
        if not sep:
            raise CardFormatError(f"header line without ':': {ln!r}")
        fields[key.strip()] = value.split("  #")[0].strip()
    missing = {"type", "tier", "domain"} - fields.keys()
    if missing:
        raise CardFormatError(f"card header misses {sorted(missing)}")
    counts = {}
    for k in _INT_FIELDS:
        try:
            counts[k] = int(fields.get(k, "0") or 0)
        except ValueError:
            raise CardFormatError(f"{k} must be an integer, got {fields[k]!r}") from None
        if counts[k] < 0:
            raise CardFormatError(f"{k} must be >= 0")
    rest = lines[end + 1 :]
    while rest and not rest[0].strip():
        rest.pop(0)
    title = card_id
    if rest and rest[0].startswith("# "):
        title = rest.pop(0)[2:].strip()
    prov = [p.strip() for p in fields.get("provenance", "").split(",") if p.strip()]
    return Card(
        id=card_id,
        type=fields["type"],
        tier=fields["tier"],
        domain=fields["domain"],
        title=title,
        body="\n".join(rest).strip(),
        provenance=prov,
        **counts,
    )


def card_dir(tier: str, domain: str) -> str:
    """Directory of a block's cards: ``cards/<tier>/<domain>`` or ``cards/universal``."""
    if tier == UNIVERSAL:
        return f"{ROOT}/{UNIVERSAL}"
    if tier not in CARD_TIERS:
        raise CardFormatError(f"no card directory for tier {tier!r}")
    return f"{ROOT}/{tier}/{check_slug(domain, 'domain')}"


def card_path(tier: str, domain: str, card_id: str) -> str:
    """Path of a card file in the live tree."""
    return f"{card_dir(tier, domain)}/{card_id}.md"


def attic_path(card: Card) -> str:
    """Path a demoted card is moved to (never read by the solver)."""
    return f"{ROOT}/{ATTIC}/{card.tier}/{card.domain}/{card.id}.md"


def _card_files(tree: Tree, directory: str) -> list[str]:
    if not tree.isdir(directory):
        return []
    return [
        f"{directory}/{n}"
        for n in tree.listdir(directory)
        if n.endswith(".md") and not n.startswith(".") and n != INDEX_FILE
    ]


def block_paths(tree: Tree, tier: str, domain: str) -> list[str]:
    """The exact, ordered card paths block (tier, domain) reads (KACE §2: the fixed projection).

    ``easy`` → ``[]``. ``medium``/``hard`` → ``cards/<tier>/<domain>/*.md`` then ``cards/universal/*.md``,
    each sorted by name. ``fallback`` reads the hard block. Raises ``ValueError`` on an unknown tier.
    """
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r} (one of {TIERS})")
    if tier == "easy":
        return []
    block_tier = "hard" if tier == "fallback" else tier
    return _card_files(tree, card_dir(block_tier, domain)) + _card_files(tree, card_dir(UNIVERSAL, UNIVERSAL))


def read_card(tree: Tree, path: str) -> Card:
    """Read and parse the card at a library-relative path (its id is the file stem)."""
    card_id = path.rsplit("/", 1)[-1].removesuffix(".md")
    return parse_card(tree.read_bytes(path).decode("utf-8"), card_id)


def write_card(tree: Tree, card: Card) -> str:
    """Write (create or replace) a card at its live path; returns the path."""
    tree.write_bytes(card.path, card.render().encode("utf-8"))
    return card.path


def all_card_paths(tree: Tree) -> list[str]:
    """Every live card path (all blocks + universal, not the attic), sorted."""
    out = _card_files(tree, card_dir(UNIVERSAL, UNIVERSAL))
    for tier in CARD_TIERS:
        tdir = f"{ROOT}/{tier}"
        if tree.isdir(tdir):
            for dom in tree.listdir(tdir):
                if tree.isdir(f"{tdir}/{dom}"):
                    out += _card_files(tree, f"{tdir}/{dom}")
    return sorted(out)


def render_context(cards: list[Card], max_chars: int = 12000) -> str:
    """The cards of one block as one prompt section (title + type + body each), cut at ``max_chars``."""
    parts, used = [], 0
    for c in cards:
        chunk = f"### {c.title} ({c.type})\n{c.body.strip()}\n"
        if used + len(chunk) > max_chars:
            break
        parts.append(chunk)
        used += len(chunk)
    return "\n".join(parts)
