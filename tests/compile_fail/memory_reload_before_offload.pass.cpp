// The passing twin of memory_reload_before_offload.fail.cpp: the offload first, the reload after it completes.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::from_text<"0F0,0OFFLOAD0,0F1,0F2,0RELOAD0,0B0,0B1,0B2">;
constexpr auto facts = pt::make_memory_plan<S>();
static_assert(facts.offloads == 1);
