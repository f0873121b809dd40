// expect: _MEMORY_LIMIT_EXCEEDED_>, pipetype::at_rank<0>, pipetype::at_stage<0>
// expect: "the limit is below one microbatch.?'s saved activation of this stage"
// A limit of 900 bytes when one microbatch's forward saves 1000: no action can meet it.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<2>, pt::microbatches<4>>;
constexpr auto facts = pt::make_memory_plan<S, pt::saved_bytes<1000>, pt::memory_limit<900>,
                                            pt::offloads<pt::memory_policy::automatic>>();
