// expect: _MISSING_ACTION_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<1>, pipetype::at_action<'B'>, pipetype::
// expect: "no backward"
// expect: "add the missing action; every stage and microbatch needs one F and either one B or one I and one W"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: rank 0 never runs the backward of microbatch 1.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,0B0\n1F0,1B0,1F1,1B1">>();
