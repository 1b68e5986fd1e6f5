"""The MCP server's path confinement, symbolic-link containment, token budget and pagination, on a real LMDB
store with the SDK's real client connected in-process (no subprocess, no mount)."""

from __future__ import annotations

import json

import anyio
import pytest
from helpers.view import mkfile
from helpers.wait import wait_until
from mcp import Client

from libraryfs.daemon.mcp_ops import LibraryOps, Loop, OutsideLibrary, clean_path
from libraryfs.daemon.mcp_registry import MARKER, Budget
from libraryfs.daemon.mcpd import Served, ServerOptions
from libraryfs.errors import AccessDenied, InvalidArgument, NameTooLong, NotFound
from libraryfs.index.tokens import count_tokens


@pytest.mark.parametrize(
    "raw, want",
    [
        ("notes/a.md", b"/notes/a.md"),
        ("/notes//./a.md", b"/notes/a.md"),
        ("library://notes/a.md", b"/notes/a.md"),
        ("/mnt/lib/notes/a.md", b"/notes/a.md"),
        ("/mnt/library", b"/mnt/library"),  # not the mountpoint: a library path like any other
        ("", b"/"),
        (".", b"/"),
    ],
)
def test_clean_path_confines(raw, want):
    assert clean_path(raw, "/mnt/lib") == want


@pytest.mark.parametrize(
    "raw, exc",
    [
        ("..", InvalidArgument),
        ("notes/../../etc/passwd", InvalidArgument),
        ("a\x00b", InvalidArgument),
        ("x" * 4096, NameTooLong),
        ("d/" + "n" * 256, NameTooLong),
    ],
)
def test_clean_path_refuses(raw, exc):
    with pytest.raises(exc):
        clean_path(raw)


@pytest.fixture
def served(libdir):
    s = Served(str(libdir), ServerOptions(indexer=False, response_tokens=200))
    yield s
    s.close()


def test_symlinks_are_followed_only_inside_the_library(served):
    ops: LibraryOps = served.ops
    v, uid, gid = ops.view, ops.uid, ops.gid
    ops.makedirs(b"/notes/sub")
    ops.write(b"/notes/plan.md", b"plan\n")
    v.symlink(b"/notes/alias", b"plan.md", uid, gid)
    v.symlink(b"/notes/sub/up", b"../plan.md", uid, gid)
    v.symlink(b"/notes/dir", b"sub", uid, gid)
    v.symlink(b"/notes/abs", b"/etc/passwd", uid, gid)
    v.symlink(b"/notes/escape", b"../../../etc/passwd", uid, gid)
    v.symlink(b"/notes/loop1", b"loop2", uid, gid)
    v.symlink(b"/notes/loop2", b"loop1", uid, gid)
    assert ops.read(b"/notes/alias") == b"plan\n"
    assert ops.read(b"/notes/sub/up") == b"plan\n"
    assert ops.follow(b"/notes/dir/up") == b"/notes/plan.md"
    for p in (b"/notes/abs", b"/notes/escape"):
        with pytest.raises(OutsideLibrary):
            ops.read(p)
    with pytest.raises(Loop):
        ops.read(b"/notes/loop1")
    ops.write(b"/notes/alias", b"new\n")  # writes through the link, like open(2)
    assert ops.read(b"/notes/plan.md") == b"new\n"

    async def main():
        async with Client(served.server) as c:
            r = await c.call_tool("read_text_file", {"path": "notes/abs"})
            assert r.is_error and "EXDEV" in r.content[0].text and "outside the library" in r.content[0].text
            for tool, args in (
                ("read_text_file", {"path": "notes/loop1"}),
                ("edit_file", {"path": "notes/loop1", "edits": [{"oldText": "a", "newText": "b"}]}),
            ):
                r = await c.call_tool(tool, args)  # ELOOP, as docs/mcp.md says (before: EIO)
                assert r.is_error and "ELOOP: /notes/loop1: too many symbolic links" in r.content[0].text

    anyio.run(main)


def test_budget_fit_cuts_at_a_line_within_the_budget():
    text = "".join(f"line {i} with some words é\n" for i in range(400))
    kept, cut = Budget(100).fit(text)
    assert cut and count_tokens(kept) <= 100 and kept.endswith("\n") and text.startswith(kept)
    assert Budget(100).fit("short\n") == ("short\n", False)


def test_truncated_reads_continue_at_next_offset_and_reassemble(served):
    body = "".join(f"{i}: naïve café — résumé entry number {i}\n" for i in range(300))
    served.ops.write(b"/long.md", body.encode())

    async def main():
        async with Client(served.server) as c:
            parts, offset, calls = [], 0, 0
            while offset is not None:
                r = await c.call_tool("read_text_file", {"path": "long.md", "offset": offset})
                text, sc = r.content[0].text, r.structured_content
                calls += 1
                if sc["truncated"]:
                    text, marker = text.rsplit("\n", 1)  # the marker follows the text after one newline
                    assert marker.startswith(MARKER) and f"offset={sc['next_offset']}" in marker
                assert count_tokens(text) <= 200
                parts.append(text)
                offset = sc["next_offset"]
            assert "".join(parts) == body and calls > 3

            seen, cursor = [], 0
            for i in range(25):
                served.ops.write(b"/d%02d.md" % i, b"x")
            while cursor is not None:
                r = await c.call_tool("list_directory", {"path": "/", "cursor": cursor, "limit": 10})
                seen += [e["name"] for e in r.structured_content["entries"]]
                cursor = r.structured_content["next_cursor"]
            assert sorted(n for n in seen if n.startswith("d")) == [f"d{i:02d}.md" for i in range(25)]
            assert len(seen) == len(set(seen))

    anyio.run(main)


def test_feature_tools_budget_verify_cards_block_code_outline(served):
    ops = served.ops
    ops.makedirs(b"/plans")
    plan = {
        "nodes": [
            {"id": "lead", "budget": {"tokens": 100, "calls": 4}, "cost": {"calls": 1}, "children": ["w"]},
            {"id": "w", "budget": {"tokens": 101, "calls": 3}},
        ]
    }
    ops.write(b"/plans/p.json", json.dumps(plan).encode())
    ops.makedirs(b"/cards/medium/algebra")
    ops.makedirs(b"/cards/universal")
    ops.write(b"/cards/medium/algebra/b-card.md", b"# B\n")
    ops.write(b"/cards/medium/algebra/a-card.md", b"# A\n")
    ops.write(b"/cards/universal/u-card.md", b"# U\n")
    ops.makedirs(b"/code/repo/pkg/mod.py")
    ops.write(b"/code/repo/pkg/mod.py/SYMBOLS.md", b"# pkg/mod.py\n\n| f | function |\n")

    async def main():
        async with Client(served.server) as c:
            r = await c.call_tool("budget_verify", {"plan": plan})
            assert not r.is_error and r.structured_content["ok"] is False
            assert "node 'lead' overspends tokens" in r.content[0].text
            plan["nodes"][1]["budget"]["tokens"] = 100
            r = await c.call_tool("budget_verify", {"plan": plan})
            assert r.structured_content["ok"] is True and "conserves" in r.content[0].text
            r = await c.call_tool("budget_verify", {"path": "plans/p.json"})
            assert r.structured_content["ok"] is False  # the file still holds the overspending plan
            assert (await c.call_tool("budget_verify", {})).is_error
            r = await c.call_tool("cards_block", {"tier": "medium", "domain": "algebra"})
            assert r.structured_content["paths"] == [
                "cards/medium/algebra/a-card.md",
                "cards/medium/algebra/b-card.md",
                "cards/universal/u-card.md",
            ]
            assert r.content[0].text.index("# A") < r.content[0].text.index("# U")
            assert (
                await c.call_tool("cards_block", {"tier": "easy", "domain": "algebra"})
            ).structured_content["paths"] == []
            assert (await c.call_tool("cards_block", {"tier": "nope", "domain": "algebra"})).is_error
            r = await c.call_tool("code_outline", {"repo": "repo", "file": "pkg/mod.py"})
            assert r.content[0].text.startswith("# pkg/mod.py")
            for args in ({"repo": "repo", "file": "nope.py"}, {"repo": "..", "file": "etc/passwd"}):
                r = await c.call_tool("code_outline", args)
                assert r.is_error, r.content[0].text

    anyio.run(main)


def test_an_offset_inside_a_character_starts_at_the_next_one(served):
    served.ops.write(b"/u.md", "héllo\n".encode())

    async def main():
        async with Client(served.server) as c:
            r = await c.call_tool("read_text_file", {"path": "u.md", "offset": 2})  # inside "é"
            assert not r.is_error and r.content[0].text == "llo\n"
            assert r.structured_content["offset"] == 3

    anyio.run(main)


def test_mode_bits_are_checked_as_the_mount_checks_them(served):
    """The kernel checks modes on the mount (default_permissions); the MCP server checks them the same way
    for its own uid. Files made by root here; the server then acts as an unprivileged uid."""
    ops = served.ops
    ops.makedirs(b"/shared")
    ops.write(b"/shared/a.md", b"a\n")  # 0644, owner root
    ops.uid, ops.gid, ops.groups = 12345, 12345, {12345}  # "other" for every file above
    assert ops.read(b"/shared/a.md") == b"a\n"  # o+r
    for change in (
        lambda: ops.write(b"/shared/a.md", b"b\n"),  # no o+w on the file
        lambda: ops.write(b"/shared/new.md", b"n\n"),  # no o+w on the directory
        lambda: ops.makedirs(b"/shared/sub"),
        lambda: ops.move(b"/shared/a.md", b"/shared/b.md"),
    ):
        with pytest.raises(AccessDenied):
            change()
    ops.view.chmod(b"/shared/a.md", 0o640)
    with pytest.raises(AccessDenied):
        ops.read(b"/shared/a.md")
    ops.makedirs(b"/shared")  # an existing directory needs no permission
    ops.uid = 0
    assert ops.read(b"/shared/a.md") == b"a\n"  # root passes, as on the mount
    listed = wait_until(lambda: [n for n, _st in ops.listdir(b"/shared")] == [b"INDEX.md", b"a.md"], 30)
    assert listed  # root lists it; INDEX.md once the directory has settled (docs/posix.md)


def test_listing_shows_the_generated_names_that_resolve(served):
    """MCP ``list_directory`` lists what the mount's ``readdir`` leaves out (lookup-only generated names) while
    they resolve, marked generated; a user's own ``INDEX.md`` is listed once and is not generated."""
    ops = served.ops
    ops.makedirs(b"/d")
    root = {n: ops.generated(n, b"/") for n, _st in ops.listdir(b"/", stat=False)}
    assert root[b"INDEX.md"] and root[b".libraryfs"] and root[b".find"] and b".catalogue" not in root
    assert [n for n, _st in ops.listdir(b"/d")] == []  # not settled yet: no INDEX.md to read either
    with pytest.raises(NotFound):
        ops.read(b"/d/INDEX.md")
    wait_until(lambda: ops.listdir(b"/d") != [], 30, "the new directory to settle")
    assert [n for n, _st in ops.listdir(b"/d")] == [b"INDEX.md"] and ops.generated(b"INDEX.md", b"/d")
    assert ops.read(b"/d/INDEX.md").startswith(b"<!-- libraryfs toc:")
    with pytest.raises(AccessDenied):  # over MCP the generated INDEX.md is read-only (docs/mcp.md)
        ops.write(b"/d/INDEX.md", b"# mine\n")
    mkfile(
        ops.view, b"/d/INDEX.md", b"# mine\n"
    )  # as on the mount: the user's INDEX.md wins, page 0 -> .index/
    assert [(n, ops.generated(n, b"/d")) for n, _st in ops.listdir(b"/d")] == [
        (b".index", True),
        (b"INDEX.md", False),
    ]
    assert ops.read(b"/d/INDEX.md") == b"# mine\n"
    assert [n for n, _st in ops.listdir(b"/d/.index")] == [b"INDEX.md"]

    async def main():  # read_index and the section resource still give the TOC, from where it is served
        async with Client(served.server) as c:
            r = await c.call_tool("read_index", {"path": "d"})
            assert r.structured_content["path"] == "/d/.index/INDEX.md"
            assert r.content[0].text.startswith("<!-- libraryfs toc:")
            res = await c.read_resource("library://d/INDEX.md")
            assert res.contents[0].text.startswith("<!-- libraryfs toc:")

    anyio.run(main)


def test_move_file_never_takes_or_moves_a_generated_name_and_names_the_path_at_fault(served):
    """``move_file`` onto a generated ``INDEX.md`` (settled or not yet built, and the master TOC) or into a
    generated directory is EACCES naming the destination, and nothing moves; a generated source is EACCES
    too; a missing destination directory is ENOENT and an existing destination EEXIST, both naming the
    destination (before: "Moved …" over the TOC, and errors naming the source, which exists)."""
    ops = served.ops
    ops.makedirs(b"/notes")
    ops.makedirs(b"/emptyA")
    ops.makedirs(b"/emptyB")
    ops.write(b"/notes/plan.md", b"# Plan\n")
    ops.write(b"/notes/e.md", b"e\n")

    async def call(c, name, args):
        r = await c.call_tool(name, args)
        return bool(r.is_error), r.content[0].text

    async def main():
        async with Client(served.server) as c:
            cases = [
                ("notes/plan.md", "notes/INDEX.md", "EACCES: /notes/INDEX.md: "),  # not built yet
                ("notes/plan.md", "/INDEX.md", "EACCES: /INDEX.md: "),
                ("notes/plan.md", ".index/0001.md", "EACCES: /.index/0001.md: "),
                ("notes/plan.md", ".catalogue/x.md", "EACCES: /.catalogue/x.md: "),
                ("INDEX.md", "notes/toc.md", "EACCES: /INDEX.md: "),
                ("notes/e.md", "nodir/e.md", "ENOENT: /nodir/e.md: "),
                ("emptyA", "emptyB", "EEXIST: /emptyB: "),
                ("nope.md", "notes/nope.md", "ENOENT: /nope.md: "),
            ]
            for src, dst, want in cases:
                err, text = await call(c, "move_file", {"source": src, "destination": dst})
                assert err and want in text, (src, dst, text)
            wait_until(lambda: b"INDEX.md" in dict(ops.listdir(b"/notes")), 30, "notes to settle")
            assert ops.generated(b"INDEX.md", b"/notes")
            err, text = await call(
                c, "move_file", {"source": "notes/plan.md", "destination": "notes/INDEX.md"}
            )
            assert err and "EACCES: /notes/INDEX.md: " in text, text
            assert ops.read(b"/notes/plan.md") == b"# Plan\n"  # nothing moved
            assert ops.read(b"/notes/INDEX.md").startswith(b"<!-- libraryfs toc:")
            err, text = await call(c, "move_file", {"source": "notes/plan.md", "destination": "notes/p.md"})
            assert not err, text

    anyio.run(main)


def test_writes_into_generated_directories_are_eacces(served):
    """``write_file`` under ``.index/`` or ``.catalogue/`` (not built: no such directory) is EACCES like
    ``.libraryfs/`` and ``.find/`` (docs/mcp.md), not ENOENT; a user's own stored INDEX.md is written."""
    ops = served.ops
    for p in (b"/.index/0001.md", b"/.catalogue/x.md", b"/.libraryfs/x", b"/.find/x", b"/.subjects/x"):
        with pytest.raises(AccessDenied):
            ops.write(p, b"x")
    ops.makedirs(b"/d")
    mkfile(ops.view, b"/d/INDEX.md", b"# mine\n")
    ops.write(b"/d/INDEX.md", b"# still mine\n")
    assert ops.read(b"/d/INDEX.md") == b"# still mine\n"


def test_create_directory_never_takes_a_generated_name(served):
    """``create_directory`` of a path through or at a generated name (the master ``INDEX.md``, a section's
    ``INDEX.md`` not built yet, ``.index/``, ``.find/``) is EACCES like ``write_file`` and ``move_file``, and
    makes nothing; the TOCs stay files (before: "Created /INDEX.md/x", a stored directory INDEX.md
    shadowing the master TOC, which moved to ``.index/INDEX.md``). A user's own directories are made."""
    ops = served.ops
    ops.makedirs(b"/dictionary")
    for path in ("INDEX.md/x", "INDEX.md", "dictionary/INDEX.md", "a/b/INDEX.md", ".index/x", ".find/x"):

        async def main(path=path):
            async with Client(served.server) as c:
                r = await c.call_tool("create_directory", {"path": path})
                assert r.is_error and "EACCES: /" in r.content[0].text, (path, r.content[0].text)

        anyio.run(main)
    assert not ops.view.getattr(b"/INDEX.md")["st_mode"] & 0o040000  # still the master TOC, a file
    assert ops.page0_path(b"/") == b"/INDEX.md"
    assert ops.generated(b"INDEX.md", b"/dictionary")
    assert [n for n, _st in ops.listdir(b"/a/b") if not ops.generated(n, b"/a/b")] == []
    assert ops.makedirs(b"/a/b/c") == [b"/a/b/c"]


def test_a_trailing_slash_on_a_file_path_is_refused_and_writes_nothing(served):
    """``write_file "notes/plan.md/"`` is ENOTDIR (an existing file) or EISDIR (a new name), as open(2) answers
    a trailing slash on a non-directory, and nothing is written (before: it wrote ``notes/plan.md``)."""
    ops = served.ops
    ops.makedirs(b"/notes")
    ops.write(b"/notes/plan.md", b"# Plan\n")

    async def main():
        async with Client(served.server) as c:
            cases = [
                ("write_file", {"path": "notes/plan.md/", "content": "x"}, "ENOTDIR: /notes/plan.md: "),
                ("write_file", {"path": "notes/new.md/", "content": "x"}, "EISDIR: /notes/new.md: "),
                (
                    "edit_file",
                    {"path": "notes/plan.md/", "edits": [{"oldText": "Plan", "newText": "P"}]},
                    "ENOTDIR",
                ),
            ]
            for tool, args, want in cases:
                r = await c.call_tool(tool, args)
                assert r.is_error and want in r.content[0].text, (args, r.content[0].text)

    anyio.run(main)
    assert ops.read(b"/notes/plan.md") == b"# Plan\n"
    assert [n for n, _st in ops.listdir(b"/notes") if not ops.generated(n, b"/notes")] == [b"plan.md"]


def test_control_characters_in_names_are_escaped_as_the_tocs_escape_them(served):
    """A name holding a newline or a tab is listed by ``list_directory`` and ``search_files`` as the TOCs
    show it (``new\\x0aline.md``, :func:`libraryfs.shown.escape_controls`): one entry, one line; the
    escaped path passed back reaches the file (before: the raw newline, one entry read as two lines)."""
    ops = served.ops
    ops.makedirs(b"/notes")

    async def main():
        async with Client(served.server) as c:
            r = await c.call_tool("write_file", {"path": "notes/new\nline.md", "content": "nl\n"})
            assert not r.is_error and r.structured_content["path"] == "/notes/new\\x0aline.md"
            await c.call_tool("write_file", {"path": "notes/tab\there.md", "content": "tab\n"})
            r = await c.call_tool("list_directory", {"path": "notes"})
            names = [e["name"] for e in r.structured_content["entries"]]
            assert "new\\x0aline.md" in names and "tab\\x09here.md" in names, names
            lines = r.content[0].text.splitlines()
            assert "[FILE] new\\x0aline.md" in lines and "[FILE] tab\\x09here.md" in lines, lines
            r = await c.call_tool("search_files", {"path": "/", "pattern": "*line*"})
            assert r.structured_content["matches"] == ["/notes/new\\x0aline.md"]
            assert r.content[0].text == "/notes/new\\x0aline.md"
            r = await c.call_tool("read_text_file", {"path": "notes/new\\x0aline.md"})
            assert not r.is_error and r.content[0].text == "nl\n"

    anyio.run(main)
    assert ops.read(b"/notes/new\nline.md") == b"nl\n"


@pytest.mark.parametrize(
    "shown, c1, want",
    [
        (b"zero\\x200bwidth.md", False, "zero\u200bwidth.md".encode()),  # 4 hex digits: the character
        (b"rtl\\x202egpj.md", False, "rtl\u202egpj.md".encode()),
        (b"caf\\xe9.md", False, b"caf\xe9.md"),  # 2 hex digits: the byte
        (b"\\x85ab.md", False, b"\x85ab.md"),  # U+85AB is no escaped character: byte 0x85, then "ab"
        (b"\\x0a0b.md", False, b"\n0b.md"),
        (b"nel\\x85.md", True, "nel\u0085.md".encode()),  # C1 as the character
        (b"nel\\x85.md", False, b"nel\x85.md"),
        (b"sp\\x20.md", False, b"sp\\x20.md"),  # never an escape: kept as typed
        (b"a\\x00b.md", False, b"a\\x00b.md"),  # no name holds a NUL: kept as typed (a trial stored one)
        (b"\\x000a.md", False, b"\\x000a.md"),
    ],
)
def test_unescape_shown_inverts_show(shown, c1, want):
    from libraryfs.daemon.mcp_ops import show, unescape_shown

    assert unescape_shown(shown, c1_chars=c1) == want
    if shown != want:
        assert show(want) == shown.decode()


def test_search_files_says_when_the_tree_is_deeper_than_it_searched(served):
    """A file 100 directories down: ``search_files`` walks 64 levels (:data:`~libraryfs.daemon.mcp_tools.
    SEARCH_DEPTH`) and answered "No matches found" with ``truncated`` false — a wrong "no". Now the answer is
    marked (``truncated``, ``depth_limit_reached``, a line naming the bound); a match within the bound is
    still found, and a shallow tree still gets a plain "No matches found"."""
    ops = served.ops
    p = b"/deep"
    ops.makedirs(p)
    for _ in range(100):
        p += b"/d"
        ops.view.mkdir(p, 0o755, 0, 0)
    ops.write(p + b"/leaf.txt", b"leaf\n")
    ops.write(b"/deep/d/near.txt", b"near\n")

    async def main():
        async with Client(served.server) as c:
            for pat in ("leaf.txt", "**/leaf.txt"):
                r = await c.call_tool("search_files", {"path": "/", "pattern": pat})
                assert not r.is_error
                doc = r.structured_content
                assert doc["matches"] == [] and doc["truncated"] and doc["depth_limit_reached"], doc
                text = r.content[0].text
                assert (
                    "No matches found" not in text and "more than 64 levels below / were not searched" in text
                )
            r = await c.call_tool("search_files", {"path": "/", "pattern": "near.txt"})
            assert (
                r.structured_content["matches"] == ["/deep/d/near.txt"] and r.structured_content["truncated"]
            )
            deeper = "/deep" + "/d" * 60
            r = await c.call_tool("search_files", {"path": deeper, "pattern": "leaf.txt"})
            assert r.structured_content["matches"] == [deeper + "/d" * 40 + "/leaf.txt"]
            assert not r.structured_content["truncated"] and not r.structured_content["depth_limit_reached"]
            r = await c.call_tool("search_files", {"path": deeper, "pattern": "nothing.txt"})
            assert r.content[0].text == "No matches found" and not r.structured_content["truncated"]

    anyio.run(main)


def test_tail_of_a_sparse_file_is_refused_as_binary_as_a_plain_read_is(served):
    """``read_text_file`` with ``tail`` on a 5 GiB file that is one hole (``truncate -s 5G``): its last window
    is NUL bytes with no line end, dropped whole as a part line into an empty answer (``is_error`` false).
    Now the same EINVAL as a plain read and ``head``, from the one window read (the hole is not read)."""
    ops = served.ops
    ops.write(b"/sparse", b"")
    ops.view.truncate(b"/sparse", 5 << 30)

    async def main():
        async with Client(served.server) as c:
            for args in ({}, {"head": 1}, {"tail": 10}):
                r = await c.call_tool("read_text_file", {"path": "sparse", **args})
                assert r.is_error, (args, r.content[0].text[:200])
                assert r.content[0].text.endswith(
                    "EINVAL: /sparse: binary file (a NUL byte): not readable as text"
                )

    anyio.run(main)


def test_recall_of_a_missing_episode_and_budget_verify_of_a_missing_path_are_enoent_naming_the_path(served):
    """docs/mcp.md "Errors": a missing file is ENOENT. ``recall`` of an episode with no ``steps.jsonl``
    answered ``EINVAL: episode 'nope' has no steps.jsonl``; ``budget_verify`` of ``/etc/passwd`` (a host path,
    taken as the library's ``/etc/passwd``) answered ``ENOENT: no such file or directory``, no path named."""

    async def main():
        async with Client(served.server) as c:
            r = await c.call_tool("recall", {"episode": "nope", "question": "x"})
            assert r.is_error and r.content[0].text.endswith(
                "ENOENT: /episodes/nope/steps.jsonl: episode 'nope' has no steps.jsonl"
            ), r.content[0].text
            r = await c.call_tool("budget_verify", {"path": "/etc/passwd"})
            assert r.is_error and "ENOENT: /etc/passwd: " in r.content[0].text, r.content[0].text

    anyio.run(main)
