// The passing twin of mesh_world.fail.cpp: 4 × 2 ranks cover a world of 8.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::world<8>>();
static_assert(facts.collectives == 8);
