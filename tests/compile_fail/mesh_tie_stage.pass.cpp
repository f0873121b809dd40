// The passing twin of mesh_tie_stage.fail.cpp: the embedding (stage 0) tied to the head (stage 3).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<4, 2>, pt::tied<0, 3>>();
static_assert(facts.collectives == 8 + 4);
