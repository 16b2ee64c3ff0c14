#!/bin/sh
# One command for the side-by-side benchmark; see bench/run.py (--quick for a smoke run).
exec python3 "$(dirname "$0")/run.py" "$@"
