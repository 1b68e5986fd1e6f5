#!/usr/bin/env bash
# POSIX conformance: run the whole pjdfstest suite (github.com/pjd/pjdfstest) inside a fresh libraryfs mount.
#
#   bench/pjdfstest.sh [PJDFSTEST_DIR]
#
# PJDFSTEST_DIR holds a built pjdfstest (default /work/pjdfstest-build; never inside the repository). Build:
#   git clone https://github.com/pjd/pjdfstest && cd pjdfstest && autoreconf -ifs && ./configure && make pjdfstest
# (needs autoconf automake libtool gcc make; the tests need perl's `prove`).
#
# The library is mounted with --allow-other (the suite switches uid/gid) and default_permissions (always on:
# the kernel checks modes). Must run as root. Environment:
#   TIMEOUTS   kernel cache timeouts entry,attr,negative in s (default 1,1,1 = what `libraryfs mount` uses)
#   INDEXER    1 to run the indexer beside the suite (default 1)
#   JOBS       prove -j (default 1)
#   TESTS      test files or directories relative to tests/ (default: all)
#   STORE      a store URL for the library (`libraryfs init --store`), e.g. etcd://127.0.0.1:2379,…/pjd
#              (an empty prefix; start a cluster with scripts/etcd-cluster.sh); default: LMDB
#
# Prints the per-file failures and a summary; writes bench/results/pjdfstest-t<timeouts>.json and .log.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
pjd=${1:-${PJDFSTEST_DIR:-/work/pjdfstest-build}}
timeouts=${TIMEOUTS:-1,1,1}
indexer=${INDEXER:-1}
jobs=${JOBS:-1}
tests=${TESTS:-}

if [ "$(id -u)" != 0 ]; then echo "pjdfstest.sh: must run as root" >&2; exit 2; fi
if [ ! -x "$pjd/pjdfstest" ]; then
    if [ -f "$pjd/configure.ac" ]; then
        (cd "$pjd" && autoreconf -ifs && ./configure && make pjdfstest) >/dev/null || exit 2
    else
        echo "pjdfstest.sh: no pjdfstest in $pjd (see the header for how to build it)" >&2; exit 2
    fi
fi
command -v prove >/dev/null || { echo "pjdfstest.sh: prove (perl) is missing" >&2; exit 2; }

work=$(mktemp -d /tmp/libraryfs-pjd.XXXXXX)
lib=$work/lib
mnt=$work/mnt
mkdir -p "$mnt" "$repo/bench/results"
tag=pjdfstest-t${timeouts//,/-}
store=${STORE:-}
[ -z "$store" ] || tag=$tag-${store%%://*}
log=$repo/bench/results/$tag.log

cleanup() {
    cd /
    libraryfs umount "$mnt" >/dev/null 2>&1 || fusermount3 -uz "$mnt" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

libraryfs init "$lib" ${store:+--store "$store"} >/dev/null || exit 2
margs=(--allow-other --timeouts "$timeouts" --no-llm)
[ "$indexer" = 1 ] || margs+=(--no-indexer)
libraryfs mount "${margs[@]}" "$lib" "$mnt" >/dev/null || exit 2

# the suite creates its files in the current directory: a subdirectory of the mount (the root also holds the
# generated INDEX.md and the .libraryfs/ control plane)
mkdir "$mnt/pjd" && chmod 0755 "$mnt/pjd" && cd "$mnt/pjd" || exit 2

targets=()
if [ -n "$tests" ]; then for t in $tests; do targets+=("$pjd/tests/$t"); done; else targets=("$pjd/tests"); fi
start=$(date +%s)
prove -r -j "$jobs" "${targets[@]}" >"$log" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
cd /

python3 - "$log" "$repo/bench/results/$tag.json" "$timeouts" "$secs" "$indexer" "${store%%://*}" <<'PY'
import json, re, sys
log, out, timeouts, secs, indexer, backend = sys.argv[1:]
backend = backend or "lmdb"
text = open(log, errors="replace").read()
m = re.search(r"Files=(\d+), Tests=(\d+)", text)
files, tests = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
failed = {}
for f, n in re.findall(r"^(\S+\.t)\s+\(Wstat: \d+ Tests: \d+ Failed: (\d+)\)", text, re.M):
    if int(n):
        failed[f.split("/tests/", 1)[-1]] = int(n)
bad_plan = re.findall(r"^(\S+\.t)\s+\(Wstat: \d+ Tests: \d+ Failed: 0\)\s*\n\s+Parse errors", text, re.M)
nfail = sum(failed.values())
passed = tests - nfail
print(f"{'file':<40} failed")
for f, n in sorted(failed.items()):
    print(f"{f:<40} {n}")
print(f"\npjdfstest on libraryfs ({backend}, timeouts {timeouts}, indexer {'on' if indexer == '1' else 'off'}): "
      f"{passed}/{tests} tests passed ({100 * passed / max(1, tests):.2f}%), {files} files, "
      f"{len(failed)} files with failures, {secs} s")
json.dump({"files": files, "tests": tests, "passed": passed, "failed": nfail, "failed_by_file": failed,
           "timeouts": timeouts, "indexer": indexer == "1", "seconds": int(secs), "backend": backend}, open(out, "w"), indent=2)
PY
exit 0
