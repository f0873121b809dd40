// expect: _STAGE_ON_TWO_RANKS_>, pipetype::at_rank<1>, pipetype::at_stage<0>, pipetype::at_microbatch<1>, pipetype::at_action<'F', 0>, pipetype::
// expect: "the stage already has actions on another rank"
// expect: "put every action of a stage on one rank, the rank its placement names"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: stage 0 appears on rank 0 and on rank 1.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0B0,1F1,1B1,0B1\n0F1,1F0,1B0">>();
