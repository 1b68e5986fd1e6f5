#!/usr/bin/env bash
# Run the test suite with the interpreter scripts/setup.sh installed into. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(cat scripts/.python 2>/dev/null || echo python3)
# Two workers (pytest-xdist, tests/README.md "Workers"): a module's tests run on one worker, and every module
# of the real local model on the same one (tests/conftest.py pytest_xdist_make_scheduler). LIBRARYFS_TEST_WORKERS=0 (or
# `-n 0` among the arguments) runs the tests in this process, e.g. for -s or --pdb.
workers=${LIBRARYFS_TEST_WORKERS:-2}
dist=()
if [ "$workers" != 0 ]; then
  dist=(-n "$workers" --dist loadfile)
fi
# -p no:benchmark: a pytest-benchmark installed in the same interpreter (not a dependency of ours) turns its
# "disabled under xdist" warning into an internal error under our filterwarnings=error
exec "$py" -m pytest -q -p no:cacheprovider -p no:benchmark "${dist[@]}" "$@"
