// expect: interleaved_1f1b: microbatches must be a multiple of ranks
// A rejected schedule: 7 microbatches on 3 ranks fit neither Megatron's rule nor PyTorch's relaxed one.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::interleaved_1f1b<pt::ranks<3>, pt::microbatches<7>, pt::chunks<2>>>();
