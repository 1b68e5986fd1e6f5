"""Library Theorem benchmark script: the same as ``libraryfs bench theorem`` (options passed through).

    python bench/theorem_run.py                 # temporary library, mounted; results in bench/results/theorem
    python bench/theorem_run.py --large --dir /tmp/th   # 10⁴…10⁶ on a plain directory

See docs/theorem.md for the tables it prints and what they mean.
"""

from __future__ import annotations

import sys

from libraryfs_bench.cli import bench

if __name__ == "__main__":
    bench.main(["theorem", *sys.argv[1:]], prog_name="bench/theorem_run.py")
