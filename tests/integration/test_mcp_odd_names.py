"""``libraryfs mcp`` over stdio with a file whose name is not UTF-8 (``caf\\xe9.md``, as a Latin-1 shell writes
it through the mount): every tool that names it answers, escaped as the TOC and ``libraryfs find`` escape it
(``\\xNN``), and the server stays up. Before, the name went out as a lone surrogate (``os.fsdecode``), the
SDK's stdout writer could not encode the response, and the whole server exited on the first such answer."""

from __future__ import annotations

import anyio
from helpers.mcp_server import stdio_params, wait_for
from mcp import Client

from libraryfs.daemon.mcpd import Served, ServerOptions

NAME = b"caf\xe9.md"  #: Latin-1 "café.md": not UTF-8
SHOWN = "caf\\xe9.md"  #: how every answer names it


def test_a_non_utf8_name_is_escaped_and_the_server_stays_up(libdir):
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        s.ops.makedirs(b"/notes")
        s.ops.write(b"/notes/" + NAME, b"# Zebra crossing notes\n")
    finally:
        s.close()

    async def main():
        async with Client(stdio_params(str(libdir))) as c:

            async def indexed():  # the server's indexer summarised it into notes/INDEX.md
                r = await c.call_tool("read_index", {"path": "notes"})
                return not r.is_error and "Zebra crossing" in r.content[0].text and r

            r = await wait_for(indexed, libdir=libdir)
            assert {"path": "/notes/" + SHOWN, "kind": "entry"} in r.structured_content["links"]
            r = await c.call_tool("list_directory", {"path": "notes"})
            assert [e["name"] for e in r.structured_content["entries"] if not e["generated"]] == [SHOWN]
            r = await c.call_tool("directory_tree", {"path": "/", "depth": 2})
            notes = next(n for n in r.structured_content["tree"] if n["name"] == "notes")
            assert [n["name"] for n in notes["children"]] == [SHOWN]
            r = await c.call_tool("search_files", {"path": "/", "pattern": "*.md"})
            assert r.structured_content["matches"] == ["/notes/" + SHOWN]

            async def found():
                r = await c.call_tool("find", {"term": "zebra"})
                return not r.is_error and [m["path"] for m in r.structured_content["matches"]]

            assert "/notes/" + SHOWN in await wait_for(found, libdir=libdir)
            # the name as shown opens the file: read, edit, info, move
            r = await c.call_tool("read_text_file", {"path": "notes/" + SHOWN})
            assert not r.is_error and "Zebra crossing" in r.content[0].text, r
            r = await c.call_tool(
                "edit_file", {"path": "notes/" + SHOWN, "edits": [{"oldText": "Zebra", "newText": "Pelican"}]}
            )
            assert not r.is_error, r
            r = await c.call_tool("get_file_info", {"path": "/notes/" + SHOWN})
            assert not r.is_error, r
            r = await c.call_tool(
                "move_file", {"source": "notes/" + SHOWN, "destination": "notes/old-" + SHOWN}
            )
            assert not r.is_error, r
            # still serving after all of them
            r = await c.call_tool("read_index", {"path": "/"})
            assert not r.is_error

    anyio.run(main)
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:  # the escaped names were taken as the bytes they stand for
        assert s.ops.read(b"/notes/old-" + NAME) == b"# Pelican crossing notes\n"
        names = [n for n, _st in s.ops.listdir(b"/notes", stat=False)]
        assert b"old-" + NAME in names and NAME not in names, names
    finally:
        s.close()


def test_a_literal_backslash_name_is_taken_as_typed(libdir):
    """A name that holds ``\\xe9`` as four characters (not a byte that is not UTF-8) is found as typed."""
    literal = b"caf\\xe9.md"
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        s.ops.write(b"/" + literal, b"literal\n")
    finally:
        s.close()

    async def main():
        async with Client(stdio_params(str(libdir))) as c:
            r = await c.call_tool("read_text_file", {"path": literal.decode()})
            assert not r.is_error and "literal" in r.content[0].text, r

    anyio.run(main)

    anyio.run(main)


INVISIBLE = {  #: a name holding an invisible character → how every answer shows it
    "zero\u200bwidth.md": "zero\\x200bwidth.md",  # ZERO WIDTH SPACE
    "rtl\u202egpj.md": "rtl\\x202egpj.md",  # RIGHT-TO-LEFT OVERRIDE: shows as "rtljpg.md" raw
    "nel\u0085line.md": "nel\\x85line.md",  # NEXT LINE (C1): shown like the lone byte 0x85
    "sep\u2028ara.md": "sep\\x2028ara.md",  # LINE SEPARATOR
}


def test_names_with_invisible_characters_round_trip_in_their_escaped_form(libdir):
    """Zero-width, bidi and C1 control characters in a name are shown escaped (``zero\\x200bwidth.md``,
    :func:`libraryfs.shown.escape_controls`), but that form passed back found nothing (ENOENT): only
    ``\\xNN`` bytes were taken back. Now each shown name reaches its file, for reading, editing and moving;
    a lone byte 0x85 beside the character U+0085 (both shown ``\\x85``) each keep their own file."""
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        s.ops.makedirs(b"/odd")
        for name in INVISIBLE:
            s.ops.write(b"/odd/" + name.encode(), name.encode() + b"\n")
        s.ops.write(b"/odd/byte\x85line.md", b"the byte\n")
    finally:
        s.close()

    async def main():
        async with Client(stdio_params(str(libdir), "--no-indexer")) as c:
            r = await c.call_tool("list_directory", {"path": "odd"})
            shown = [e["name"] for e in r.structured_content["entries"] if not e["generated"]]
            assert sorted(shown) == sorted([*INVISIBLE.values(), "byte\\x85line.md"]), shown
            for name, esc in INVISIBLE.items():
                r = await c.call_tool("read_text_file", {"path": "odd/" + esc})
                assert not r.is_error and r.content[0].text == name + "\n", (esc, r.content[0].text)
                r = await c.call_tool("get_file_info", {"path": "/odd/" + esc})
                assert not r.is_error, (esc, r.content[0].text)
            r = await c.call_tool("read_text_file", {"path": "odd/byte\\x85line.md"})
            assert not r.is_error and r.content[0].text == "the byte\n", r.content[0].text
            edit = {"oldText": "zero", "newText": "ZERO"}
            r = await c.call_tool("edit_file", {"path": "odd/zero\\x200bwidth.md", "edits": [edit]})
            assert not r.is_error, r.content[0].text
            r = await c.call_tool(
                "move_file", {"source": "odd/rtl\\x202egpj.md", "destination": "odd/rtl.md"}
            )
            assert not r.is_error, r.content[0].text

    anyio.run(main)
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:  # the escaped names were taken as the characters they stand for
        assert s.ops.read("/odd/zero\u200bwidth.md".encode()) == "ZERO\u200bwidth.md\n".encode()
        assert s.ops.read(b"/odd/rtl.md") == "rtl\u202egpj.md\n".encode()
        names = [n for n, _st in s.ops.listdir(b"/odd", stat=False)]
        assert "rtl\u202egpj.md".encode() not in names, names
    finally:
        s.close()


def test_an_escaped_nul_names_no_nul_byte(libdir):
    """``notes/a\\x00b.md`` passed to ``write_file`` and ``create_directory`` (a trial's): the escape was undone
    into a NUL byte after the NUL check, and the store got ``a\\0b.md`` — listed as ``a``, unreachable,
    ``readdir`` of its directory EIO, ``check`` I2. No name holds a NUL, so ``\\x00`` stays as typed: the file
    is named with a literal backslash, the store stays clean."""
    from libraryfs.fs.check import check

    async def main():
        async with Client(stdio_params(str(libdir), "--no-indexer")) as c:
            r = await c.call_tool("create_directory", {"path": "notes"})
            assert not r.is_error, r.content[0].text
            r = await c.call_tool("write_file", {"path": "notes/a\\x00b.md", "content": "nul"})
            assert not r.is_error, r.content[0].text
            r = await c.call_tool("create_directory", {"path": "notes/\\x00"})
            assert not r.is_error, r.content[0].text
            r = await c.call_tool("list_directory", {"path": "notes"})
            shown = sorted(e["name"] for e in r.structured_content["entries"] if not e["generated"])
            assert shown == ["\\x00", "a\\x00b.md"], shown
            r = await c.call_tool("read_text_file", {"path": "notes/a\\x00b.md"})
            assert not r.is_error and r.content[0].text == "nul", r.content[0].text

    anyio.run(main)
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        assert s.ops.read(b"/notes/a\\x00b.md") == b"nul"
        report = check(s.ops.view.store)
    finally:
        s.close()
    assert not report.problems, report.problems
