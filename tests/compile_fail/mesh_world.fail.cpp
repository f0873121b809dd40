// expect: _BAD_MESH_
// expect: "the world.?'s ranks are not a multiple of the pipeline.?'s ranks \(pp\)"
// expect: pp x dp equal to the world.?'s ranks
// A mesh of 4 pipeline ranks cannot cover a world of 6 ranks.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::world<6>>();
