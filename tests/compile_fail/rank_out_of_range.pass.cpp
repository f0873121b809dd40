// The passing twin of rank_out_of_range.fail.cpp: rank 1.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr pt::program good() {
  pt::program_builder b{2, 2, 1};
  b.rank(0).add(pt::F(0, 0)).add(pt::B(0, 0));
  b.rank(1).add(pt::F(1, 0)).add(pt::B(1, 0));
  return std::move(b).build();
}
constexpr auto plan = pt::make_plan<pt::from_function<good>>();
static_assert(plan.ranks == 2);
