"""Every option the docs give a ``libraryfs`` command exists on that command (issue 14: docs/service.md listed
indexer options the CLI rejected). The commands are the real click objects, plugins included: what
``--help`` prints."""

import os
import re

import click
import pytest

from libraryfs.cli.main import cli

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DOCS = ["README.md"] + [
    os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")
]
#: prefixes naming a command the way the docs write it: ``libraryfs …``, the process entries
ENTRIES = {"python -m libraryfs.daemon.mountd": ["mountd"], "python -m libraryfs.daemon.indexer": ["indexer"]}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w…-])")


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The deepest (sub)command named by ``words`` and the words naming it."""
    ctx = click.Context(cli)
    cmd: click.Command = cli
    path: list[str] = []
    for w in words:
        if not isinstance(cmd, click.Group):
            break
        sub = cmd.get_command(ctx, w)
        if sub is None:
            break
        cmd, path = sub, [*path, w]
    return cmd, path


def options_of(cmd: click.Command) -> set[str]:
    """Every option string ``--help`` lists for ``cmd``."""
    out = {"--help", "-h"}
    for p in cmd.params:
        out.update(getattr(p, "opts", []))
        out.update(getattr(p, "secondary_opts", []))
    return out


def documented_uses() -> list[tuple[str, str, list[str], str]]:
    """``(doc, command line as written, command words, option)`` for every option of a documented command:
    inline code spans and code-block lines that start with ``libraryfs`` or a process entry."""
    from libraryfs.cli.mount_cmds import mountd

    uses = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        spans = [s.replace("\n", " ") for s in re.findall(r"(?<!`)`([^`]+)`(?!`)", text)]
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        spans += [ln for b in blocks for ln in b.splitlines()]
        for span in spans:
            span = span.strip().removeprefix("$ ")
            words = None
            for prefix, entry in ENTRIES.items():
                if span.startswith(prefix):
                    words, rest = entry, span[len(prefix) :]
            if words is None and span.startswith("libraryfs "):
                rest = span[len("libraryfs ") :]
                words = [w for w in rest.split() if re.fullmatch(r"[a-z][a-z-]*", w)]
            if words is None:
                continue
            rest = rest.split("#")[0].split("&&")[0].split("|")[0]
            for opt in OPTION.findall(rest):
                uses.append((doc, span, words, opt))
    assert mountd.params  # the process entry of the mount server is a click command too
    return uses


def test_the_docs_name_commands_with_options():
    assert len(documented_uses()) > 30  # the parser finds what the docs say (not an empty pass)


@pytest.mark.parametrize("doc", DOCS)
def test_every_documented_option_exists(doc):
    from libraryfs.cli.mount_cmds import mountd

    wrong = []
    for d, span, words, opt in documented_uses():
        if d != doc:
            continue
        cmd, path = (mountd, ["mountd"]) if words == ["mountd"] else resolve(words)
        if opt not in options_of(cmd):
            wrong.append(f"`{span}`: {opt} is not an option of `libraryfs {' '.join(path)}`")
    assert not wrong, "\n".join(wrong)
