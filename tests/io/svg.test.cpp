#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "../read_file.hpp"

#include "small_step.hpp"

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
