// expect: _MIXED_BACKWARD_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>, pipetype::at_action<'I'>, pipetype::
// expect: "use either the full backward B or the split pair I and W for a stage and microbatch, not both"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: microbatch 0 has a full B and an I/W split.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0I0,0W0,0B0">>();
