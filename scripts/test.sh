#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every unit and integration test.
# Integration tests run the real binaries, real processes and real signals.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
# A clean clone builds once: incremental caches would only take disk.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo build --bins
# The demo (the README's first command) runs the release build, which the suite itself no longer
# makes (the package test packs the dev build): its code must still compile (~2 min clean here,
# where a full release build with fat LTO takes ~13).
cargo check --release --bins --locked
bash scripts/check-systemd.sh target/debug/stewardd
bash scripts/schemathesis.sh          # fuzzes the real daemon against docs/openapi.json
bash scripts/schemathesis-sched.sh    # fuzzes steward-sched serve against docs/sched-openapi.json
bash scripts/test-package.sh          # builds, lints, installs, upgrades and purges the packages
# The cluster tests again with every command asking `steward-sched serve --no-run` (issue 46).
STEWARD_TEST_VIA_SERVE=1 cargo test --test sched_convergence --test sched_placement \
    --test sched_failed_rollouts --test sched_endpoints
cargo test --all-targets              # last, so its summary closes the output
