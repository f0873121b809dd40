// expect: _DUPLICATE_ACTION_>, pipetype::at_rank<1>, pipetype::at_stage<1>, pipetype::at_microbatch<0>, pipetype::at_action<'F', 2>, pipetype::
// expect: "remove the second copy of the action"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: rank 1 runs the forward of microbatch 0 twice.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,0B0,0B1\n1F0,1B0,1F0,1F1,1B1">>();
