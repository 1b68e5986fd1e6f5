#!/usr/bin/env bash
# Build llama-cpp-python once per machine and keep the wheel: `scripts/llama_wheel.sh PYTHON` prints the
# directory holding llama_cpp_python-<version>-py3-none-linux_<arch>.whl (pass it to pip --find-links).
#
# llama-cpp-python ships no wheel on PyPI; its sdist compiles llama.cpp (CPU only here). Flags: CPU backend
# tuned for this CPU (-march=native), no multimodal library (LLAVA_BUILD), no llama.cpp common library
# (scripts/llama_cpp_no_common.cmake), no tests/examples/tools/server, no OpenSSL; all cores.
# The cache key covers the version, the flags, the compiler and the CPU's feature flags, so a wheel built
# for another CPU (or with other flags) is never reused. Cache: $LIBRARYFS_WHEEL_CACHE, default
# /var/cache/libraryfs/wheels (root) or ~/.cache/libraryfs/wheels. Concurrent runs wait on a lock.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
version=0.3.36  # keep equal to the pin of the llm-local extra in pyproject.toml
include=$PWD/scripts/llama_cpp_no_common.cmake
cmake_args="-DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
-DCMAKE_PROJECT_llama.cpp_INCLUDE=$include"
if [ "$(id -u)" = 0 ]; then default_cache=/var/cache/libraryfs/wheels; else default_cache=$HOME/.cache/libraryfs/wheels; fi
cache=${LIBRARYFS_WHEEL_CACHE:-$default_cache}
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)
key=$( { echo "$version"; echo "$cmake_args" | sed "s|$include||"; cat "$include"; gcc --version | head -1;
         uname -m; echo "$cpu_flags"; } | sha256sum | cut -c1-16)
dir=$cache/llama-cpp-python-$version-$key
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  tmp=$(mktemp -d "$cache/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  log=$(mktemp /tmp/llama-wheel.XXXXXX.log)
  start=$(date +%s)
  echo "building llama-cpp-python $version from source, once per machine (~5 CPU-minutes) ..." >&2
  if ! CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
       "$py" -m pip wheel --no-deps --no-binary llama-cpp-python -w "$tmp" "llama-cpp-python==$version" \
       >"$log" 2>&1; then
    tail -40 "$log" >&2; echo "llama-cpp-python build failed (full log: $log)" >&2; exit 1
  fi
  rm -f "$log"
  mv "$tmp" "$dir"  # atomic: a wheel directory is complete or absent
  trap - EXIT
  echo "built llama-cpp-python $version in $(( $(date +%s) - start )) s: $dir" >&2
fi
echo "$dir"
