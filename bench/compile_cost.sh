#!/usr/bin/env bash
# Compile cost of plans instantiated at compile time (issue acceptance: a TU with verified plans
# for interleaved p=8 m=64 v=2 and 1F1B p=16 m=128, compiled with g++; and zb_auto's plan for
# p=8 m=16 at 1F1B's memory, within 3 s and 512 MB with g++: zb_auto_p8_m16, which includes the
# two headers it needs; _all includes pipetype.hpp, _refine adds a refinement pass). `empty` is
# pipetype.hpp alone.
#
#   bash bench/compile_cost.sh            # g++ (and clang++ if present), one run each, a table
#
# Prints wall time and peak memory per (compiler, TU). Plans past the compilers' default
# constexpr limits get the flags pipetype_large_plans() adds (the table says which).
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tu() {  # name, body, [the headers it includes: pipetype.hpp unless given]
  cat > "$tmp/$1.cpp" <<CPP
${3:-#include <pipetype/pipetype.hpp>}
namespace pt = pipetype;
$2
int main() { return 0; }
CPP
}
tu small 'constexpr auto p = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>(); static_assert(p.ops().size() > 0);'
tu interleaved_p8_m64_v2 'constexpr const auto& p = pt::plan_v<pt::interleaved_1f1b<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>>; static_assert(p.ops().size() > 0);'
tu one_f_one_b_p16_m128 'constexpr const auto& p = pt::plan_v<pt::one_f_one_b<pt::ranks<16>, pt::microbatches<128>>>; static_assert(p.ops().size() > 0);'
zb_body() {  # zb_auto's plan at p = 8, m = 16, 1F1B's memory, with the given effort (zb_effort)
  echo "struct c { static constexpr pt::costs value{.f = 1, .b = 2}; };
constexpr auto p = pt::make_plan<pt::zb_auto<pt::ranks<8>, pt::microbatches<16>, c, 8${1:-}>>(); static_assert(p.ops().size() > 0);"
}
tu zb_auto_p8_m16_all "$(zb_body)"
tu zb_auto_p8_m16_refine "$(zb_body ', pt::zb_effort{.refine = 1}')"
# the headers it needs rather than all of pipetype.hpp (whose parsing alone is about 2 s)
tu zb_auto_p8_m16 "$(zb_body)" '#include <pipetype/compile/plan.hpp>
#include <pipetype/schedules/zb_auto.hpp>'
tu empty ''
tu acceptance_both 'constexpr const auto& a = pt::plan_v<pt::interleaved_1f1b<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>>;
constexpr const auto& b = pt::plan_v<pt::one_f_one_b<pt::ranks<16>, pt::microbatches<128>>>;
static_assert(a.ops().size() > 0 && b.ops().size() > 0);'
tu acceptance_both_copies 'constexpr auto a = pt::make_plan<pt::interleaved_1f1b<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>>();
constexpr auto b = pt::make_plan<pt::one_f_one_b<pt::ranks<16>, pt::microbatches<128>>>();
static_assert(a.ops().size() > 0 && b.ops().size() > 0);'

printf "%-10s %-24s %-8s %9s %10s  %s\n" compiler tu flags "time [s]" "peak [MB]" result
for cxx in g++ clang++; do
  command -v $cxx >/dev/null || continue
  case $cxx in
    g++) large="-fconstexpr-ops-limit=4294967296 -fconstexpr-loop-limit=16777216" ;;
    clang++) large="-fconstexpr-steps=2000000000" ;;
  esac
  for name in empty small interleaved_p8_m64_v2 one_f_one_b_p16_m128 acceptance_both acceptance_both_copies \
    zb_auto_p8_m16 zb_auto_p8_m16_all zb_auto_p8_m16_refine; do
    for flags in default large; do
      extra=""
      [ $flags = large ] && extra=$large
      out=$(/usr/bin/time -f "%e %M" $cxx -std=c++20 -O2 -Iinclude $extra -c "$tmp/$name.cpp" -o "$tmp/$name.o" 2>&1)
      rc=$?
      read -r secs kb <<<"$(echo "$out" | tail -1)"
      result=ok
      if [ $rc -ne 0 ]; then
        result="fails: $(echo "$out" | grep -o -m1 -E "exceeds limit of [0-9]+|maximum step limit|error: .{0,50}" | head -1)"
      fi
      printf "%-10s %-24s %-8s %9s %10d  %s\n" $cxx $name $flags "$secs" $((kb / 1024)) "$result"
      [ $rc -eq 0 ] && [ $flags = default ] && break  # no need for the flags
    done
  done
done
