// The passing twin of mesh_collective_order.fail.cpp: each reduction after its stage's last backward.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::from_text<"0F0,0F1,0B0,0B1,0REDUCE_GRAD\n1F0,1B0,1F1,1B1,1REDUCE_GRAD">;
constexpr auto facts = pt::make_mesh_plan<S, pt::mesh_t<2, 2>>();
static_assert(facts.collectives == 4);
