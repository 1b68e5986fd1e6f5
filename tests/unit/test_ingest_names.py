"""``ingest`` of names near NAME_MAX into a real directory tree (the mount's :class:`DirTree` path)."""

import os

from libraryfs.daemon.ingest import ingest_tree
from libraryfs.fs.tree import DirTree


def test_a_source_name_of_255_bytes_is_ingested_with_the_rest(tmp_path):
    """The temporary name ``.<name>.<pid>.tmp`` of a 255-byte name was over NAME_MAX: ``ingest`` stopped
    with ENAMETOOLONG part-way (9 of 31 files). A tree ``cp -a`` copies is now ingested whole, and no
    temporary file is left."""
    src = tmp_path / "src"
    (src / "names").mkdir(parents=True)
    long_names = ["a" * 255, "中" * 85, "é" * 126 + ".md"]  # 255, 255 and 255 bytes
    for k, n in enumerate(long_names):
        (src / "names" / n).write_bytes(b"long %d\n" % k)
    for k in range(5):
        (src / f"n{k}.md").write_bytes(b"short %d\n" % k)
    dest = tmp_path / "dest"
    dest.mkdir()
    out = ingest_tree(str(tmp_path / "lib"), str(src), "imp", progress=False, tree=DirTree(dest))
    assert out["files"] == len(long_names) + 5
    assert sorted(os.listdir(dest / "imp" / "names")) == sorted(long_names)
    assert (dest / "imp" / "names" / ("a" * 255)).read_bytes() == b"long 0\n"
    assert not [f for _d, _s, fs in os.walk(dest) for f in fs if f.endswith(".tmp")]
