"""Card format, tree layout, deterministic block selection, keyword classifier."""

import pytest

from libraryfs.features.cards.cards import (
    Card,
    CardFormatError,
    all_card_paths,
    block_paths,
    parse_card,
    read_card,
    render_context,
    write_card,
)
from libraryfs.features.cards.classify import classify
from libraryfs.fs.tree import DirTree


def card(cid, tier="medium", domain="combinatorics", **kw):
    return Card(
        id=cid,
        type=kw.pop("type", "lemma"),
        tier=tier,
        domain=domain,
        title=kw.pop("title", cid.upper()),
        body=kw.pop("body", f"body of {cid}"),
        **kw,
    )


@pytest.fixture
def tree(tmp_path):
    t = DirTree(tmp_path)
    for c in [
        card("sum-rule"),
        card("bijection"),
        card("inclusion-exclusion", tier="hard"),
        card("parity", domain="number-theory"),
        card("lte", tier="hard", domain="number-theory"),
        card("check-small-cases", tier="universal", domain="universal", type="verification"),
        card("extremal", tier="universal", domain="universal", type="invariant"),
    ]:
        write_card(t, c)
    t.write_bytes("cards/medium/combinatorics/notes.txt", b"not a card")
    t.write_bytes("cards/attic/medium/combinatorics/old.md", card("old").render().encode())
    return t


def test_roundtrip_keeps_every_field():
    c = card(
        "pigeonhole",
        type="invariant",
        provenance=["champ:C_x", "trace:P_1"],
        uses=7,
        helped=5,
        hurt=2,
        body="If n+1 objects go into n boxes,\n\none box holds two.",
    )
    back = parse_card(c.render(), "pigeonhole")
    assert back == c


@pytest.mark.parametrize(
    "text,msg",
    [
        ("type: lemma\n", "start with"),
        ("---\ntype: lemma\ntier: medium\n", "not closed"),
        ("---\ntype: lemma\ntier: medium\n---\n", "misses"),
        ("---\ntype: theorem\ntier: medium\ndomain: algebra\n---\n", "card type"),
        ("---\ntype: lemma\ntier: easy\ndomain: algebra\n---\n", "card tier"),
        ("---\ntype: lemma\ntier: universal\ndomain: algebra\n---\n", "universal"),
        ("---\ntype: lemma\ntier: medium\ndomain: Algebra!\n---\n", "slug"),
        ("---\ntype: lemma\ntier: medium\ndomain: algebra\nuses: many\n---\n", "integer"),
    ],
)
def test_bad_headers_are_rejected(text, msg):
    with pytest.raises(CardFormatError, match=msg):
        parse_card(text, "x")


def test_layout_paths(tree):
    assert tree.exists("cards/medium/combinatorics/sum-rule.md")
    assert tree.exists("cards/universal/extremal.md")
    assert read_card(tree, "cards/hard/number-theory/lte.md").tier == "hard"


def test_easy_block_reads_no_cards(tree):
    for dom in ("combinatorics", "number-theory", "geometry"):
        assert block_paths(tree, "easy", dom) == []


def test_exact_card_set_per_block(tree):
    uni = ["cards/universal/check-small-cases.md", "cards/universal/extremal.md"]
    assert (
        block_paths(tree, "medium", "combinatorics")
        == ["cards/medium/combinatorics/bijection.md", "cards/medium/combinatorics/sum-rule.md"] + uni
    )
    assert (
        block_paths(tree, "hard", "combinatorics")
        == ["cards/hard/combinatorics/inclusion-exclusion.md"] + uni
    )
    assert block_paths(tree, "medium", "number-theory") == ["cards/medium/number-theory/parity.md"] + uni
    assert block_paths(tree, "hard", "number-theory") == ["cards/hard/number-theory/lte.md"] + uni
    assert block_paths(tree, "fallback", "number-theory") == block_paths(tree, "hard", "number-theory")
    assert block_paths(tree, "medium", "geometry") == uni  # no branch yet: universal only


def test_block_selection_is_a_function_of_the_listing(tree, tmp_path):
    before = block_paths(tree, "medium", "combinatorics")
    assert block_paths(DirTree(tmp_path), "medium", "combinatorics") == before
    write_card(tree, card("aaa-first"))
    assert block_paths(tree, "medium", "combinatorics")[0] == "cards/medium/combinatorics/aaa-first.md"


def test_unknown_tier_is_an_error(tree):
    with pytest.raises(ValueError):
        block_paths(tree, "expert", "combinatorics")


def test_all_card_paths_excludes_attic(tree):
    paths = all_card_paths(tree)
    assert len(paths) == 7 and not any("/attic/" in p for p in paths)


def test_render_context_respects_budget():
    cs = [card(f"c{i}", body="x" * 100) for i in range(10)]
    ctx = render_context(cs, max_chars=300)  # each card is ~116 chars
    assert ctx.count("### ") == 2


@pytest.mark.parametrize(
    "text,domain",
    [
        (
            "How many strings of length 6 using digits 1, 2, 3 have adjacent digits differing by at most 1?",
            "combinatorics",
        ),
        ("Find all primes p such that p^2 + 2 is prime.", "number-theory"),
        ("Find all polynomials P(x) with real coefficients such that P(x^2) = P(x)^2.", "polynomial"),
        ("The sequence a_1 = 1, a_{n+1} = 2 a_n + 1. Find a_10.", "sequence"),
        ("In triangle ABC the angle at A is 60 degrees and the circumcircle has radius 1.", "geometry"),
        ("Solve for x.", "algebra"),
    ],
)
def test_classifier(text, domain):
    assert classify(text) == domain
