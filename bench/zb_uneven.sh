#!/usr/bin/env bash
# zb-auto searched with uneven costs (long-tailed microbatch lengths, unequal rank speeds)
# against the fixed schedules and against zb-auto searched for uniform costs, on the simulator.
# Usage: bash bench/zb_uneven.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target bench_zb_uneven >/dev/null
exec ./build/release/bench/bench_zb_uneven "$@"
