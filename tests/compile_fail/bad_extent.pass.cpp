// The twin: the same schedule type with its extent() exact.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct exact_extent {
  static constexpr pt::program generate() { return pt::make_one_f_one_b(2, 2); }
  static constexpr pt::program_extent extent() { return {2, 2, 2, 8, 1}; }
};
constexpr auto plan = pt::make_plan<exact_extent>();
static_assert(plan.ops().size() > 0);
int main() { return 0; }
