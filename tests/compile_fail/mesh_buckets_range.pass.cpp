// The passing twin of mesh_buckets_range.fail.cpp: two buckets under FSDP, each stage's reduction
// two reduce-scatters on each of the two replicas, beside its gathers.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::sharded<3>, pt::bucketed<2>>();
static_assert(facts.collectives == 24);
