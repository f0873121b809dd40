#!/usr/bin/env bash
# How the mesh step's bookkeeping grows (issue 41, docs/03 §3.8): each row runs once on the
# release build and prints its time and peak memory (GNU time), then the growth against the row
# before (the size doubles each row: 2.0 is linear, 4.0 quadratic).
#   1. the host mesh executor: gpt over ranks × 2 replicas with a model of width 8 (the model's
#      own memory is negligible: what grows is the executor's bookkeeping);
#   2. memory actions placed under a byte limit: the explorer's 1F1B p=4 with automatic offload
#      and recompute under --act-limit-mb, m = 256 … 2048.
#
#   bash bench/growth.sh             # builds what it needs in build/release, prints two tables
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/bin/time ] || { echo "bench/growth.sh needs GNU time (apt-get install time)" >&2; exit 1; }
build=${BUILD:-build/release}
cmake --preset release -B "$build" >/dev/null && cmake --build "$build" --target gpt pipetype-explore -j2 >/dev/null || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

table() {  # title; then rows of "label|command..."
  printf "\n%s\n%-34s %9s %10s %12s %12s\n" "$1" "case" "time [s]" "peak [MB]" "time growth" "memory growth"
  shift
  local prev_t="" prev_m=""
  for row in "$@"; do
    local label=${row%%|*} cmd=${row#*|}
    if ! /usr/bin/time -f "%e %M" -o "$tmp/t" bash -c "$cmd" >"$tmp/out" 2>"$tmp/err"; then
      printf "%-34s failed: %s\n" "$label" "$(tail -1 "$tmp/err")"
      return 1
    fi
    read -r t kb <"$tmp/t"
    local mb=$((kb / 1024))
    local gt="-" gm="-"
    [ -n "$prev_t" ] && gt=$(awk -v a="$t" -v b="$prev_t" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    [ -n "$prev_m" ] && gm=$(awk -v a="$mb" -v b="$prev_m" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    printf "%-34s %9s %10s %12s %12s\n" "$label" "$t" "$mb" "$gt" "$gm"
    prev_t=$t prev_m=$mb
  done
}

gpt=$build/examples/gpt
rows=()
for p in 8 16 32 64; do
  rows+=("gpt --ranks $p --dp 2, width 8|$gpt --ranks $p --dp 2 --layers $p --heads 2 --width 8 --seq 8 --rows 1 --microbatches 8 --steps 1 --json")
done
table "host mesh executor (one step, its binding and checks)" "${rows[@]}"

explore=$build/examples/pipetype-explore
rows=()
for m in 256 512 1024 2048; do
  rows+=("1f1b p=4 m=$m, auto under 250 MB|$explore --schedule 1f1b --ranks 4 --microbatches $m --act-mb 100 --offload auto --recompute auto --pcie-gbps 10 --act-limit-mb 250 --format json")
done
table "memory actions placed under a limit (explorer)" "${rows[@]}"
