#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every unit and integration test.
# Integration tests run the real binaries, real processes and real signals.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
