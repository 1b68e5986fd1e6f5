#!/usr/bin/env bash
# Run the test suite with the interpreter scripts/setup.sh installed into. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(cat scripts/.python 2>/dev/null || echo python3)
exec "$py" -m pytest -q -p no:cacheprovider "$@"
