// expect: _MEMORY_LIMIT_EXCEEDED_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<4>, pipetype::at_action<'F', 4>, pipetype::
// expect: "activations above the limit"
// expect: "run backwards earlier \(fewer forwards in flight\), or raise the memory limit"
// expect: in_schedule<pipetype::gpipe<?
// A rejected schedule: GPipe holds all 8 microbatches on rank 0; the limit is 4.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::gpipe<pt::ranks<4>, pt::microbatches<8>>, pt::plan_options{.mem_limit = 4}>();
