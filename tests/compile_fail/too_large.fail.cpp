// expect: _TOO_LARGE_>, pipetype::
// expect: "more than 65536 stages \(pipetype::limits::stages\)"
// expect: "stay within pipetype::limits \(docs/03\): fewer ranks, stages, microbatches or stage-graph edges"
// expect: in_schedule<pipetype::from_text<?
// A dozen bytes that name stage 10^6 and microbatch 10^6: past pipetype::limits, the plan is
// refused before any table of stages x microbatches is made (not a constexpr allocation of
// terabytes).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using huge = pt::from_text<"0F0,1000000F1000000">;
constexpr auto plan = pt::make_plan<huge>();
int main() {}
