// expect: _COLLECTIVE_MISPLACED_>
// expect: "ZeRO-1 with FSDP: sharded parameters shard the optimizer\\?'s state already \(one of them\)"
// ZeRO-1 over FSDP: the optimizer's state would be sharded twice.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::sharded<3>, pt::zero<1>>();
