// The passing twin of mesh_zero_fsdp.fail.cpp: FSDP with the optimizer in the step (it steps each
// replica's shard), a reduce-scatter a stage a replica and the gathers and releases.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::sharded<3>, pt::with_optimizer>();
static_assert(facts.rejection.ok());
