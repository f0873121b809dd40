// The passing twin of index_out_of_range.fail.cpp: 3 microbatches declared.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr pt::program good() {
  pt::program_builder b{1, 1, 3};
  b.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1)).add(pt::F(0, 2)).add(pt::B(0, 0)).add(pt::B(0, 1)).add(pt::B(0, 2));
  return std::move(b).build();
}
constexpr auto plan = pt::make_plan<pt::from_function<good>>();
static_assert(plan.microbatches == 3);
