"""The bound on kept session base directories (tests/helpers/tmpbase.py): old and surplus kept bases go,
a base holding a live mount stays, and so does every base young enough to belong to a running session."""

from __future__ import annotations

import os
import time

from helpers import tmpbase
from helpers.mount import mount

from libraryfs.fs.store import Store

DAY_S = 24 * 3600


def _base(root, name: str, age_s: float, now: float):
    d = root / f"{tmpbase.PREFIX}{name}"
    (d / "test_x0").mkdir(parents=True)
    (d / "test_x0" / "f").write_text("kept for the post-mortem\n")
    os.utime(d, (now - age_s, now - age_s))
    return d


def test_old_and_surplus_bases_go_and_a_mounted_or_young_one_stays(tmp_path):
    now = time.time()
    root = tmp_path / "tmp"
    old = _base(root, "old", 2 * DAY_S, now)
    mounted_old = _base(root, "mounted", 3 * DAY_S, now)
    own = _base(root, "own", 3 * DAY_S, now)
    young = [
        _base(root, f"young{k}", 60 + k, now) for k in range(tmpbase.KEEP + 2)
    ]  # running sessions, maybe
    idle = [_base(root, f"idle{k}", tmpbase.IDLE_S + 600 + k, now) for k in range(3)]  # past the newest KEEP
    other = root / "not-a-base"
    other.mkdir()
    os.utime(other, (now - 3 * DAY_S, now - 3 * DAY_S))
    lib = tmp_path / "lib"
    Store.create(lib, {"toc_max_tokens": 2000}).close()
    with mount(lib, mounted_old / "test_x0" / "mnt", indexer=False):
        removed = tmpbase.prune_kept_bases(str(root), own=str(own), now=now)
        assert mounted_old.is_dir()  # a live mount under it: never touched
    assert sorted(removed) == sorted(str(p) for p in [old, *idle])
    assert not old.exists() and not any(p.exists() for p in idle)
    assert own.is_dir() and other.is_dir() and all(p.is_dir() for p in young)
