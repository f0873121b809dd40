// expect: _COLLECTIVE_MISPLACED_>
// expect: "a gradient reduction in fewer than one bucket"
// A stage's gradient reduction in no bucket at all.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::sharded<3>, pt::bucketed<0>>();
