#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include <fstream>
#include <sstream>
#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_grid {

namespace pt = pipetype;

namespace {
std::string golden(const std::string& name) {
  std::ifstream in(std::string(PIPETYPE_TEST_DATA) + "/" + name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string render(const pt::program& p, const pt::costs& c, pt::grid_options o = {}) {
  return pt::grid(p.view(), pt::simulate(p.view(), c), o);
}
}  // namespace

TEST_CASE("grid: 1F1B, 4 ranks, 6 microbatches, F=1 B=2") {
  CHECK(render(pt::make_one_f_one_b(4, 6), {.f = 1, .b = 2}) == golden("1f1b_p4_m6.txt"));
}

TEST_CASE("grid: interleaved 1F1B, 2 ranks, 4 microbatches, 2 chunks, F=B=1") {
  CHECK(render(pt::make_interleaved_1f1b(2, 4, 2), {.f = 1, .b = 1}) == golden("interleaved_p2_m4_v2.txt"));
}

TEST_CASE("grid: GPipe with communication latency, half-unit columns") {
  CHECK(render(pt::make_gpipe(2, 3), {.f = 1, .b = 2, .comm = 0.5}, {.quantum = 0.5}) ==
        golden("gpipe_p2_m3_comm.txt"));
}

TEST_CASE("grid: an overlapped pair prints as one cell") {
  const std::string g = render(pt::parse_schedule("0F0,0F1,(0F2;0B0),0B1,0B2\n"), {.f = 1, .b = 2});
  CHECK(g.find("|(0F2;0B0)") != std::string::npos);
  CHECK(g == golden("overlap.txt"));
}

TEST_CASE("grid: costs of 10^9 are drawn in a bounded width, the column scaled and named") {
  const pt::program prog = pt::make_one_f_one_b(4, 8);
  const pt::timeline t = pt::simulate(prog.view(), pt::costs{.f = 1e9, .b = 2e9});
  const std::string g = pt::grid(prog.view(), t);
  CHECK(g.rfind("(one column = 2e+07 time units)\n", 0) == 0);  // makespan 3.3e10 / 2000 columns
  std::size_t widest = 0, start = 0;
  for (std::size_t nl = g.find('\n'); nl != std::string::npos; start = nl + 1, nl = g.find('\n', start))
    widest = std::max(widest, nl - start);
  CHECK(widest < 2000 * 6);  // columns × (cell + bar), not 3.3e10 of them
  // a bound of 0 keeps one column per quantum
  const pt::timeline small = pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2});
  CHECK(pt::grid(prog.view(), small, {.quantum = 1, .max_columns = 0}) == pt::grid(prog.view(), small));
  CHECK(pt::grid(prog.view(), small).find("one column") == std::string::npos);
}

TEST_CASE("grid: fractional costs get a finer column, so equal actions draw equally wide") {
  const std::string g = render(pt::make_one_f_one_b(2, 3), {.f = 1.5, .b = 2.5});
  CHECK(g.rfind("(one column = 0.5 time units)\n", 0) == 0);
  // every forward spans 3 columns, every backward 5, whatever its start
  auto width = [&](const std::string& label) {
    const std::size_t at = g.find("|" + label);
    REQUIRE(at != std::string::npos);
    return g.find_first_not_of(' ', at + 1 + label.size()) - at;  // to the next '|'
  };
  CHECK(width("0F0") == width("0F1"));
  CHECK(width("0F1") == width("1F2"));
  CHECK(width("0B0") == width("1B2"));
  CHECK(width("0B0") > width("0F0"));
  // integral costs keep one unit per column and no note
  CHECK(render(pt::make_one_f_one_b(2, 3), {.f = 1, .b = 2}).rfind("time", 0) == 0);
}

}  // namespace test_grid
}  // namespace
