#!/usr/bin/env bash
# Measured step time of the host executor vs the simulated makespan, with stages that sleep
# F = 2 ms and B = 4 ms (I = W = 2 ms when split), p = 4, m = 8: every built-in schedule.
# Usage: bash bench/faithfulness.sh [bench_faithfulness flags]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target bench_faithfulness >/dev/null
exec ./build/release/bench/bench_faithfulness "$@"
