#!/usr/bin/env bash
# Time and peak memory of the explorer against size (issue 13: bounded everywhere): each row runs
# `pipetype-explore ... --format json` once (generate or read, verify with the lock-step run,
# lower with slot assignment, verify the lowered ops, simulate) on the release build.
#
#   bash bench/scale.sh            # builds the release explorer if needed, prints a table
#   BUILD=build/h2rel bash bench/scale.sh   # another release build folder (configured from the preset)
#
# "B/action" is the peak memory (RSS) divided by the program's actions: what the run-time tables
# cost end to end (issue 27 asks at most 100).
#
# Sizes go up to the documented limits (docs/03_diagnostics.md, 3.6): a row near
# limits::cells (stages x microbatches = 4194304) is the largest program a file may describe.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/bin/time ] || { echo "bench/scale.sh needs GNU time (apt-get install time)" >&2; exit 1; }
build=${BUILD:-build/release}
cmake --preset release -B "$build" >/dev/null && cmake --build "$build" --target pipetype-explore -j2 >/dev/null || exit 1
explore=$build/examples/pipetype-explore
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# one rank per line: F then B for each microbatch (GPipe order), p ranks, m microbatches
file_rows() {
  awk -v p="$1" -v m="$2" 'BEGIN { for (r = 0; r < p; ++r) { s = ""; for (j = 0; j < m; ++j) s = s (j ? "," : "") r "F" j;
    for (j = 0; j < m; ++j) s = s "," r "B" j; print s } }'
}

printf "%-44s %12s %9s %10s %9s %9s  %s\n" "case" "stages x mb" "time [s]" "peak [MB]" "actions" "B/action" "result"
row() {  # label, explorer args...
  local label=$1
  shift
  /usr/bin/time -o "$tmp/time" -f "%e %M" "$explore" "$@" --format json >"$tmp/out.json" 2>"$tmp/err"
  local t kb cells actions per result
  read -r t kb < <(tail -1 "$tmp/time")
  read -r cells actions < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["stages"]*d["microbatches"], d["actions"])' "$tmp/out.json" 2>/dev/null)
  per=-
  [ -n "${actions:-}" ] && [ "${actions:-0}" -gt 0 ] && per=$((kb * 1024 / actions))
  if grep -q '"valid": true' "$tmp/out.json"; then result=ok; else result=$(head -1 "$tmp/err" | cut -c1-120); fi
  printf "%-44s %12s %9s %10d %9s %9s  %s\n" "$label" "${cells:--}" "$t" "$((kb / 1024))" "${actions:--}" "$per" "$result"
}

for m in 4096 16384 65536; do row "gpipe p=30 m=$m" --schedule gpipe --ranks 30 --microbatches "$m"; done
for m in 1024 8192 131072; do row "1f1b p=32 m=$m" --schedule 1f1b --ranks 32 --microbatches "$m"; done
row "interleaved-1f1b p=64 m=16384 v=2" --schedule interleaved-1f1b --ranks 64 --microbatches 16384 --chunks 2
row "zb-h1 p=64 m=32768" --schedule zb-h1 --ranks 64 --microbatches 32768
row "zb-h1 p=64 m=65536 (past limits::actions)" --schedule zb-h1 --ranks 64 --microbatches 65536
for m in 128 512; do row "zb-auto p=64 m=$m" --schedule zb-auto --ranks 64 --microbatches "$m"; done
# the lock-step check against ranks: one line per rank, read from a file
for pm in "1024 256" "16384 128"; do
  set -- $pm
  file_rows "$1" "$2" >"$tmp/rows_$1.txt"
  row "file: $1 ranks (lines) x $2 microbatches" --file "$tmp/rows_$1.txt"
done
