#!/usr/bin/env bash
# The whole suite N times in a row beside a CPU hog (issue 14: "passing 5 times in a row with a CPU hog"):
#
#   bash scripts/hogruns.sh N OUTDIR [pytest args]
#
# Two busy loops (`while :; do :; done`, one per core of a 2-core machine) run for the whole time; each run is
# `bash scripts/test.sh -q --durations=30 --junitxml=OUTDIR/runI.xml`, its output in OUTDIR/runI.log, and one
# line per run is appended to OUTDIR/summary.txt: `run I rc=RC SECONDS s load=1 5 15-min averages` and the
# junit counts (tests, failures, errors, skipped). Runs go on after a failure (a flake's rate is the point). Exit status: the number of failed
# runs (0: all passed).
set -u
n=${1:?usage: scripts/hogruns.sh N OUTDIR [pytest args]}
out=${2:?usage: scripts/hogruns.sh N OUTDIR [pytest args]}
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
bash -c 'while :; do :; done' & h1=$!
bash -c 'while :; do :; done' & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT
failed=0
for i in $(seq 1 "$n"); do
  s=$(date +%s)
  bash scripts/test.sh -q --durations=30 --junitxml="$out/run$i.xml" "$@" > "$out/run$i.log" 2>&1; rc=$?
  e=$(date +%s)
  [ "$rc" = 0 ] || failed=$((failed + 1))
  counts=$(grep -o -m1 -E '(tests|failures|errors|skipped)="[0-9]+"' "$out/run$i.xml" 2>/dev/null | tr '\n' ' ')
  echo "run $i rc=$rc $((e - s)) s load=$(cut -d' ' -f1-3 /proc/loadavg) ${counts:-no junit xml}" >> "$out/summary.txt"
done
exit "$failed"
