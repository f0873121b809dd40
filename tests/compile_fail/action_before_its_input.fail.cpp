// expect: _ACTION_BEFORE_ITS_INPUT_>, pipetype::at_rank<0>, pipetype::at_stage<1>, pipetype::at_microbatch<0>, pipetype::at_action<'F', 0>, pipetype::
// expect: "F before the F of the previous stage"
// expect: "move the action after the action on its rank that produces its input"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: stage 1 runs its forward before stage 0, both on rank 0.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"1F0,0F0,1B0,0B0">>();
