// The passing twin of memory_limit_below_one.fail.cpp: a limit two microbatches wide, met by offloading.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<2>, pt::microbatches<4>>;
constexpr auto facts = pt::make_memory_plan<S, pt::saved_bytes<1000>, pt::memory_limit<2000>,
                                            pt::offloads<pt::memory_policy::automatic>, pt::host_link<4000>>();
static_assert(facts.peak_bytes <= 2000);
