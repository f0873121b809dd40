// expect: _COLLECTIVE_MISPLACED_>
// expect: "buckets with FSDP: a bucketed reduce-scatter is not built yet \(buckets = 1 when sharded\)"
// Gradient buckets under FSDP: each bucket would need a reduce-scatter of its own shards.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::sharded<3>, pt::bucketed<2>>();
