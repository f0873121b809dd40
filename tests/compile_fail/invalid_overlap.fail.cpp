// expect: _INVALID_OVERLAP_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>, pipetype::at_action<'B', 2>, pipetype::
// expect: "an overlapped pair is one F and one B or I"
// expect: "overlap one F with one B or I of another stage or microbatch, the second right after the first"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: an overlapped pair of two backwards.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,(0B0;0B1)">>();
