// expect: _INVALID_OVERLAP_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>, pipetype::at_action<'F', 0>, pipetype::
// expect: "an overlapped pair cannot hold the forward and backward of one stage and microbatch"
// expect: "overlap one F with one B or I of another stage or microbatch, the second right after the first"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: an overlapped pair holds the forward and the backward of the same stage
// and microbatch, so the backward would wait for its own partner (found by the fuzzer, which saw
// it reported as a deadlock before).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"(0F0;0B0),0F1,0B1">>();
