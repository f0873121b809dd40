// schedules/family.hpp: what a schedule family is for tools.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string_view>

namespace pt = pipetype;

namespace {
// a user's family: the concept is all it takes
struct reversed_gpipe {
  static constexpr std::string_view name = "reversed-gpipe";
  static constexpr std::string_view summary = "GPipe with the backwards in microbatch order reversed";
  static constexpr int chunks = 1;
  static constexpr bool split = false;
  static constexpr const char* error(int p, int, int) noexcept { return p > 8 ? "at most 8 ranks" : nullptr; }
  static constexpr pt::program make(int p, int m, int, const pt::schedule_params&) { return pt::make_gpipe(p, m); }
};
struct not_a_family {
  static constexpr std::string_view name = "x";
};
}  // namespace

static_assert(pt::schedule_family<reversed_gpipe>);
static_assert(!pt::schedule_family<not_a_family>);
static_assert(pt::schedule_family<pt::zb_auto_family> && pt::schedule_family<pt::dualpipe_family>);
static_assert(pt::family_list<reversed_gpipe, pt::gpipe_family>::size == 2);

TEST_CASE("family: a user's family builds and checks like the built-in ones") {
  CHECK(reversed_gpipe::error(9, 4, 1) != nullptr);
  CHECK(reversed_gpipe::make(2, 4, 1, {}).actions == pt::make_gpipe(2, 4).actions);
  // zb-auto's family carries the costs and the memory limit through schedule_params
  const pt::program p = pt::zb_auto_family::make(3, 6, 1, {pt::costs{.f = 1, .b = 2}, 3});
  CHECK(pt::build_plan(p, {.mem_limit = 3}).ok());
}
