#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "../read_file.hpp"

#include "small_step.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_svg {

namespace pt = pipetype;

namespace {

/// The value of the first `name="..."` after `from`.
std::string attribute(const std::string& s, const std::string& name, std::size_t from = 0) {
  const std::size_t at = s.find(name + "=\"", from);
  REQUIRE(at != std::string::npos);
  const std::size_t b = at + name.size() + 2;
  return s.substr(b, s.find('"', b) - b);
}

/// Compares with tests/io/data/NAME; PIPETYPE_UPDATE_GOLDEN=1 rewrites it instead.
void check_golden(const std::string& got, const std::string& name) {
  const std::string path = std::string(PIPETYPE_TEST_DATA) + "/" + name;
  if (const char* u = std::getenv("PIPETYPE_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << got;
    MESSAGE("rewrote " << path);
  }
  CHECK(got == read_test_file(path));
}

}  // namespace

TEST_CASE("svg: 1F1B on 2 ranks matches its golden file") {
  pt::svg_options o;
  o.transfers = true;
  o.title = "1f1b";
  check_golden(pt::svg(test_io::small_step(), o), "1f1b_p2_m2.svg");
}

TEST_CASE("svg: one box per span in its kind's colour, a row per rank, the figures in the title") {
  const pt::step_trace t = test_io::small_step();
  pt::svg_options o;
  o.transfers = true;
  const std::string s = pt::svg(t, o);
  CHECK(s.rfind("<?xml", 0) == 0);
  CHECK(test_io::count(s, "<svg ") == 1);
  CHECK(test_io::count(s, "</svg>") == 1);
  CHECK(test_io::count(s, "<g") == test_io::count(s, "</g>"));
  CHECK(test_io::count(s, "class=\"span\"") == 8);
  CHECK(test_io::count(s, "fill=\"#4e79a7\" class=\"span\"") == 4);  // F
  CHECK(test_io::count(s, "fill=\"#59a14f\" class=\"span\"") == 4);  // B
  CHECK(test_io::count(s, "class=\"rank\" data-rank=") == 2);
  CHECK(test_io::count(s, "class=\"transfer\" marker-end") == 5);  // and the legend's
  CHECK(test_io::count(s, "class=\"memory\"") == 3);               // two curves and the legend's
  CHECK(s.find("2 ranks, 2 microbatches · makespan 10 · bubble 40% · peak 2 activations") != std::string::npos);
  // the box of 1B0 starts at t = 2.5 on rank 1's row
  const double x0 = std::stod(attribute(s, "data-x0")), k = std::stod(attribute(s, "data-px-per-unit"));
  const std::size_t row1 = s.find("data-rank=\"1\"");
  const double y1 = std::stod(attribute(s, "data-y", row1));
  const std::size_t box = s.find("<title>1B0 ");
  REQUIRE(box != std::string::npos);
  const std::size_t rect = s.rfind("<rect", box);
  CHECK(std::stod(attribute(s, "x", rect)) == doctest::Approx(x0 + 2.5 * k));
  CHECK(std::stod(attribute(s, "width", rect)) == doctest::Approx(2 * k));
  CHECK(std::stod(attribute(s, "y", rect)) == doctest::Approx(y1));
  // no arrows unless asked for
  CHECK(test_io::count(pt::svg(t), "class=\"transfer\" marker-end") == 0);
}

TEST_CASE("svg: panels of one unit share a time scale, and text is escaped") {
  const pt::step_trace a = test_io::small_step();
  const pt::program p = pt::make_gpipe(2, 4);
  const pt::step_trace b = pt::trace_of(p.view(), pt::simulate(p.view()));
  pt::svg_options o;
  o.title = "A & <B>";
  const std::string s = pt::svg({{&a, "first"}, {&b, "second"}}, o);
  CHECK(test_io::count(s, "class=\"panel\"") == 2);
  const std::size_t second = s.find("class=\"panel\"", s.find("class=\"panel\"") + 1);
  CHECK(attribute(s, "data-px-per-unit") == attribute(s, "data-px-per-unit", second));
  CHECK(s.find("A &amp; &lt;B&gt; · first") != std::string::npos);
  CHECK(s.find("A & <B>") == std::string::npos);
  // another unit gets its own scale
  pt::step_trace ms = b;
  ms.unit = "ms";
  const std::string u = pt::svg({{&a, "cost units"}, {&ms, "ms"}});
  const std::size_t u2 = u.find("class=\"panel\"", u.find("class=\"panel\"") + 1);
  CHECK(attribute(u, "data-px-per-unit") != attribute(u, "data-px-per-unit", u2));
}

TEST_CASE("svg: an overlapped pair is one red box labelled with both actions") {
  const pt::program p = pt::make_schedule("dualpipe-v", 4, 8);
  const pt::step_trace t = pt::trace_of(p.view(), pt::simulate(p.view()));
  const std::string s = pt::svg(t);
  std::size_t pairs = 0;
  for (const pt::action& a : p.view().actions) pairs += a.overlapped ? 1 : 0;
  REQUIRE(pairs > 0);
  CHECK(test_io::count(s, "fill=\"#e15759\" class=\"span\"") == pairs);
  CHECK(test_io::count(s, "<title>(") == pairs);
}

TEST_CASE("svg: an empty step still draws") {
  const pt::step_trace t;
  const std::string s = pt::svg(t);
  CHECK(test_io::count(s, "</svg>") == 1);
  CHECK(test_io::count(s, "class=\"span\"") == 0);
}

TEST_CASE("svg: a stage graph is drawn under the timeline, a box per stage in columns by depth") {
  auto picture = [](const pt::program& prog) {
    const pt::costs c{.f = 1, .b = 2};
    return pt::svg(pt::trace_of(prog.view(), pt::simulate(prog.view(), c), c));
  };
  // two towers (0 > 1, 2 > 3) into a head (4): the towers' stages share columns, the head is third
  const pt::program towers = pt::make_one_f_one_b(5, 2, pt::stage_dag{5, {{0, 1}, {2, 3}, {1, 4}, {3, 4}}});
  const std::string s = picture(towers);
  CHECK(test_io::count(s, "class=\"node\"") == 5);
  CHECK(test_io::count(s, "class=\"graphedge\"") == 4);
  CHECK(test_io::count(s, "<g") == test_io::count(s, "</g>"));
  auto box_x = [&](const std::string& svg, int stage) {
    const std::size_t at = svg.find("data-stage=\"" + std::to_string(stage) + "\"");
    REQUIRE(at != std::string::npos);
    return std::stod(attribute(svg, "x", svg.rfind("<rect", at)));
  };
  CHECK(box_x(s, 0) == box_x(s, 2));
  CHECK(box_x(s, 1) == box_x(s, 3));
  CHECK(box_x(s, 4) > box_x(s, 1));
  CHECK(box_x(s, 1) > box_x(s, 0));
  CHECK(s.find("data-from=\"3\" data-to=\"4\"") != std::string::npos);
  // each box names the rank that runs the stage (the graph form of 1F1B: the topological order)
  const std::vector<int> order = pt::topological_order(pt::stage_dag{5, towers.edges});
  for (int r = 0; r < 5; ++r)
    CHECK(s.find(">stage " + std::to_string(order[static_cast<std::size_t>(r)]) + " · rank " + std::to_string(r) +
                 "<") != std::string::npos);
  // DualPipe: one copy drawn, each box with the ranks of both lanes' copies
  const std::string dual = picture(pt::make_dualpipe(4, 8, pt::stage_dag{4, {{0, 1}, {1, 2}, {2, 3}, {0, 2}}}));
  CHECK(test_io::count(dual, "class=\"node\"") == 4);
  CHECK(dual.find(">stage 0 · ranks 0, 3<") != std::string::npos);
  // a chain: no graph
  CHECK(picture(pt::make_one_f_one_b(4, 4)).find("class=\"node\"") == std::string::npos);
  // an edge naming a stage that does not exist (an unverified program) is left out, not read
  pt::program broken = pt::make_one_f_one_b(3, 2, pt::stage_dag{3, {{0, 1}, {1, 2}}});
  broken.edges.push_back({-4, 7});
  const std::string b = picture(broken);
  CHECK(test_io::count(b, "class=\"graphedge\"") == 2);
}

}  // namespace test_svg
}  // namespace
