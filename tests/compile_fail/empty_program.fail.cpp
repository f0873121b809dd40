// expect: _EMPTY_PROGRAM_>, pipetype::
// expect: "ranks, stages and microbatches must be positive"
// expect: "give the program at least one rank, one stage and one microbatch"
// expect: in_schedule<pipetype::from_function<?
// A rejected schedule: a program with no ranks.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_function<[] { return pt::program_builder{0, 1, 1}.build(); }>>();
