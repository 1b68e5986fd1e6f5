"""READDIRPLUS through a real mount (issue 18, cold metadata walks): a listing hands the kernel every stored
entry's attributes, so ``ls -l`` sends no LOOKUP per name, and what the kernel caches from a listing is
never staler than what a lookup would have left it (hard-linked names are looked up and noted for alias
invalidation). Request counts come from the server's own counters (``status.json``: ``fuse_requests``), not
from timing. Long kernel timeouts (60 s) so that a stale cache would show instead of expiring.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers.mount import mount

N_FILES = 200


def requests(mnt: str) -> dict[str, int]:
    """The mount server's FUSE request counters now."""
    with open(os.path.join(mnt, ".libraryfs", "status.json")) as f:
        return json.load(f)["fuse_requests"]


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def ls_l(d: str) -> dict[str, list[str]]:
    """``ls -ln`` of ``d``: name → its columns (mode, links, uid, gid, size)."""
    r = subprocess.run(["ls", "-ln", d], capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines()[1:]:  # "total N" first
        cols = line.split()
        out[cols[-1]] = cols[:5]
    return out


def test_ls_l_of_a_fresh_mount_sends_no_lookup_per_entry(libdir, tmp_path):
    with mount(libdir, tmp_path / "mnt", indexer=False, timeouts="60,60,1") as m:
        os.mkdir(m.p("d"))
        for i in range(N_FILES):
            with open(m.p(f"d/f{i:03d}"), "w") as f:
                f.write("x" * i)
    # a new server: the kernel holds no dentry or attribute of the tree
    with mount(libdir, tmp_path / "mnt", indexer=False, timeouts="60,60,1") as m:
        before = requests(m.mnt)
        listing = ls_l(m.p("d"))
        counts = delta(before, requests(m.mnt))
        assert len(listing) == N_FILES
        assert all(listing[f"f{i:03d}"][4] == str(i) for i in range(N_FILES))
        assert counts.get("readdirplus_attrs", 0) >= N_FILES
        # one getattr per entry without readdirplus; a few here (d itself, status.json)
        assert counts.get("getattr", 0) < N_FILES // 10, counts


@pytest.mark.parametrize("through", ["a", "b"])
def test_hard_linked_names_listed_then_changed_through_the_other_name(libdir, tmp_path, through):
    with mount(libdir, tmp_path / "mnt", indexer=False, timeouts="60,60,1") as m:
        os.mkdir(m.p("d"))
        with open(m.p("d/a"), "w") as f:
            f.write("1")
        os.link(m.p("d/a"), m.p("d/b"))
        with open(m.p("d/c"), "w") as f:
            f.write("1")
    with mount(libdir, tmp_path / "mnt", indexer=False, timeouts="60,60,1") as m:
        first = ls_l(m.p("d"))  # the kernel caches what the listing (and the lookups it needed) told it
        assert first["a"][1] == first["b"][1] == "2" and first["a"][4] == first["b"][4] == "1"
        other = "b" if through == "a" else "a"
        with open(m.p(f"d/{through}"), "a") as f:
            f.write("2345")
        os.chmod(m.p(f"d/{through}"), 0o600)
        os.unlink(m.p("d/c"))
        st = os.stat(m.p(f"d/{other}"))  # before any new listing: what the kernel kept from the first
        assert (st.st_size, st.st_mode & 0o777) == (5, 0o600)
        after = ls_l(m.p("d"))
        assert sorted(after) == ["a", "b"]
        assert after[other][0] == "-rw-------" and after[other][4] == "5", after
        os.link(m.p(f"d/{through}"), m.p("d/c"))
        assert os.stat(m.p(f"d/{other}")).st_nlink == 3
        assert ls_l(m.p("d"))[other][1] == "3"
