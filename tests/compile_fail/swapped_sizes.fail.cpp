// expect: (rank_count|constraints not satisfied)
// expect: one_f_one_b
// The size tags are checked: ranks<> and microbatches<> given in the wrong order do not compile
// (they would otherwise build a 8-rank, 4-microbatch pipeline without a word).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using swapped = pt::one_f_one_b<pt::microbatches<8>, pt::ranks<4>>;
constexpr auto plan = pt::make_plan<swapped>();
int main() {}
