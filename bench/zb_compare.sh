#!/usr/bin/env bash
# zb-auto vs the hand-written schedules over a grid of (p, m, costs, memory limit), on the
# simulator; prints one table and a summary line. Usage: bash bench/zb_compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target bench_zb_compare >/dev/null
exec ./build/release/bench/bench_zb_compare "$@"
