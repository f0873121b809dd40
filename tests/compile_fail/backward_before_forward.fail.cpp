// expect: _BACKWARD_BEFORE_FORWARD_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<1>, pipetype::at_action<'B', 1>, pipetype::
// expect: "move the backward after the forward of the same stage and microbatch"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: rank 0 runs the backward of microbatch 1 before its forward.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1">>();
