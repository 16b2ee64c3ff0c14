#!/usr/bin/env bash
# The main job: build Steward and show what it makes of the example units in units/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cargo build --release --quiet
steward=target/release/steward

echo "== steward validate units/*"
"$steward" validate units/*.json units/*.toml

for unit in units/gamesvc.json units/ticker.toml; do
    echo
    echo "== steward render $unit --instance 0 --port http_port=31000"
    "$steward" render "$unit" --instance 0 --port http_port=31000
done
