#!/usr/bin/env bash
# Compile cost of plans instantiated at compile time (issue 27, "lean plans": every plan below
# compiles with the compilers' default constexpr limits; the acceptance TU — verified plans for
# interleaved p=8 m=64 v=2 and 1F1B p=16 m=128 — in at most 5 s and 500 MB with g++ -O2, and
# pipetype.hpp alone, `empty`, in at most 1 s). zb_auto_p8_m16 includes the two headers it needs;
# _all includes pipetype.hpp, _refine adds a refinement pass. dag16_m64 is 1F1B over a 16-stage
# graph (the chain and three skip edges).
#
#   bash bench/compile_cost.sh                 # g++ (and clang++ if present), one run each, a table
#   OLD=/tmp/old/include bash bench/compile_cost.sh   # the same TUs against another include
#       folder too (e.g. `git worktree add /tmp/old HEAD`), old and new compiled alternately so
#       that their ratio is fair on a noisy machine
#   ONLY="acceptance_both empty" CXXS=g++ bash bench/compile_cost.sh   # a subset
#
# Prints wall time and peak memory per (compiler, TU, headers). A TU is compiled with the
# default limits first; only where that fails, again with the flags pipetype_large_plans() adds
# (the table says which).
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
plan() {  # name, schedule type: a TU holding that schedule's plan (plan_v)
  tu "$1" "constexpr const auto& p = pt::plan_v<$2>; static_assert(p.ops().size() > 0);"
}
tu small 'constexpr auto p = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>(); static_assert(p.ops().size() > 0);'
plan interleaved_p8_m64_v2 'pt::interleaved_1f1b<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>'
plan looped_bfs_p8_m64_v2 'pt::looped_bfs<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>'
plan one_f_one_b_p16_m128 'pt::one_f_one_b<pt::ranks<16>, pt::microbatches<128>>'
plan zb_h1_p16_m128 'pt::zb_h1<pt::ranks<16>, pt::microbatches<128>>'
plan gpipe_p16_m128 'pt::gpipe<pt::ranks<16>, pt::microbatches<128>>'
plan zb_v_p8_m64 'pt::zb_v<pt::ranks<8>, pt::microbatches<64>>'
tu dag16_m64 'struct dag16 {  // 1F1B over a 16-stage graph: the chain and skip edges 0>4, 4>8, 8>12
  static constexpr pt::program generate() {
    std::vector<pt::stage_edge> e;
    for (int s = 0; s + 1 < 16; ++s) e.push_back({s, s + 1});
    for (int s = 0; s + 4 < 16; s += 4) e.push_back({s, s + 4});
    return pt::make_one_f_one_b(16, 64, pt::stage_dag{16, e});
  }
};
constexpr const auto& p = pt::plan_v<dag16>; static_assert(p.ops().size() > 0 && p.compute().has_edges());'
zb_body() {  # zb_auto's plan at p = 8, m microbatches, 1F1B's memory, with the given effort (zb_effort)
  echo "struct c { static constexpr pt::costs value{.f = 1, .b = 2}; };
constexpr auto p = pt::make_plan<pt::zb_auto<pt::ranks<8>, pt::microbatches<$1>, c, 8${2:-}>>(); static_assert(p.ops().size() > 0);"
}
tu zb_auto_p8_m32 "$(zb_body 32)"
tu zb_auto_p8_m16_all "$(zb_body 16)"
tu zb_auto_p8_m16_refine "$(zb_body 16 ', pt::zb_effort{.refine = 1}')"
# the headers it needs rather than all of pipetype.hpp
tu zb_auto_p8_m16 "$(zb_body 16)" '#include <pipetype/compile/plan.hpp>
#include <pipetype/schedules/zb_auto.hpp>'
tu empty ''
tu acceptance_both 'constexpr const auto& a = pt::plan_v<pt::interleaved_1f1b<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>>;
constexpr const auto& b = pt::plan_v<pt::one_f_one_b<pt::ranks<16>, pt::microbatches<128>>>;
static_assert(a.ops().size() > 0 && b.ops().size() > 0);'
tu acceptance_both_copies 'constexpr auto a = pt::make_plan<pt::interleaved_1f1b<pt::ranks<8>, pt::microbatches<64>, pt::chunks<2>>>();
constexpr auto b = pt::make_plan<pt::one_f_one_b<pt::ranks<16>, pt::microbatches<128>>>();
static_assert(a.ops().size() > 0 && b.ops().size() > 0);'

names=${ONLY:-"empty small interleaved_p8_m64_v2 looped_bfs_p8_m64_v2 one_f_one_b_p16_m128 zb_h1_p16_m128 gpipe_p16_m128
  zb_v_p8_m64 zb_auto_p8_m32 dag16_m64 acceptance_both acceptance_both_copies zb_auto_p8_m16 zb_auto_p8_m16_all
  zb_auto_p8_m16_refine"}
includes="new=include"
[ -n "${OLD:-}" ] && includes="old=$OLD new=include"

printf "%-9s %-23s %-4s %-8s %9s %10s  %s\n" compiler tu hdr flags "time [s]" "peak [MB]" result
for cxx in ${CXXS:-g++ clang++}; do
  command -v $cxx >/dev/null || continue
  case $cxx in
    g++) large="-fconstexpr-ops-limit=4294967296 -fconstexpr-loop-limit=16777216" ;;
    clang++) large="-fconstexpr-steps=2000000000" ;;
  esac
  for name in $names; do
    for inc in $includes; do  # old and new one after the other, TU by TU
      for flags in default large; do
        extra=""
        [ $flags = large ] && extra=$large
        out=$(/usr/bin/time -f "%e %M" $cxx -std=c++20 -O2 -I"${inc#*=}" $extra -c "$tmp/$name.cpp" -o "$tmp/$name.o" 2>&1)
        rc=$?
        read -r secs kb <<<"$(echo "$out" | tail -1)"
        result=ok
        if [ $rc -ne 0 ]; then
          result="fails: $(echo "$out" | grep -o -m1 -E "exceeds limit of [0-9]+|maximum step limit|error: .{0,50}" | head -1)"
        fi
        printf "%-9s %-23s %-4s %-8s %9s %10d  %s\n" $cxx $name "${inc%%=*}" $flags "$secs" $((kb / 1024)) "$result"
        [ $rc -eq 0 ] && [ $flags = default ] && break  # no need for the flags
      done
    done
  done
done
