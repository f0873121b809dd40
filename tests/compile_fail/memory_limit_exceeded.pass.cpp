// The passing twin of memory_limit_exceeded.fail.cpp: 1F1B holds at most 4 on rank 0.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan =
    pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::plan_options{.mem_limit = 4}>();
static_assert(plan.peak_activations(0) == 4);
