#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>

namespace pt = pipetype;

using hand_1f1b = pt::from_text<R"(
  # rank 0: warm up with one forward
  0F0, 0F1, 0B0, 0B1
  1F0 1B0 1F1 1B1
)">;
constexpr auto plan = pt::make_plan<hand_1f1b>();
static_assert(plan.ranks == 2 && plan.stages == 2 && plan.microbatches == 2);
static_assert(plan.actions[4] == pt::F(1, 0));

TEST_CASE("text: commas, spaces, idle slots and comments") {
  const pt::program p = pt::parse_schedule("0F0,,0F1 ,0B0,0B1   # idle slot after 0F0\n1F0 1B0, 1F1 1B1\n");
  REQUIRE(p.source_error.ok());
  CHECK(p.ranks == 2);
  CHECK(p.actions.size() == 8);
  CHECK(p.actions[1] == pt::F(0, 1));
  CHECK(pt::verify(p.view()).ok());
}

TEST_CASE("text: overlapped pairs and I/W actions") {
  const pt::program p = pt::parse_schedule("0F0,0F1,(0F2 ; 1I0),0W0\n");
  REQUIRE(p.source_error.ok());
  REQUIRE(p.actions.size() == 5);
  CHECK(p.actions[2].overlapped);
  CHECK(p.actions[3] == pt::I(1, 0));
  CHECK(p.actions[4] == pt::W(0, 0));
}

TEST_CASE("text: round trip through to_text") {
  for (const pt::program& p : {pt::make_one_f_one_b(3, 5), pt::make_interleaved_1f1b(2, 4, 3), pt::make_zb_v(3, 5),
                               pt::make_dualpipe_v(2, 4), pt::make_dualpipe(4, 8)}) {
    CAPTURE(p.name);
    const pt::program q = pt::parse_schedule(pt::to_text(p.view()));
    REQUIRE(q.source_error.ok());
    CHECK(q.actions == p.actions);
    CHECK(q.begin == p.begin);
    CHECK(q.stage_rank == p.stage_rank);
    CHECK(q.chains == p.chains);
    CHECK(pt::build_plan(q).ok());
  }
}

// DualPipe's two directions in text: a `chains 2` line (here PP = 2, m = 4: chain 0 is stages 0-1
// with microbatches 0-1, chain 1 is stages 2-3 with microbatches 2-3, stage 2 on rank 1)
using two_way = pt::from_text<R"(
  chains 2
  0F0,0F1,3F2,3F3,0B0,0B1,3B2,3B3
  1F0,1F1,2F2,2F3,1B0,1B1,2B2,2B3
)">;
static_assert(pt::make_plan<two_way>().chains == 2);

TEST_CASE("text: chains") {
  const pt::program p = pt::parse_schedule("chains 2  # two directions\n0F0,1F1\n");
  REQUIRE(p.source_error.ok());
  CHECK(p.chains == 2);
  CHECK(pt::to_text(p.view()).rfind("chains 2\n", 0) == 0);
  // a microbatch on the other chain's stage is refused by verify
  CHECK(pt::verify(pt::parse_schedule("chains 2\n0F1,0B1\n1F0,1B0\n").view()).code == pt::errc::index_out_of_range);
}

TEST_CASE("text: syntax errors name line and column") {
  struct bad {
    const char* text;
    int line, column;
    const char* why;
  };
  const bad cases[] = {
      {"0F0,0X0", 1, 6, "expected F, B, I or W"},
      {"0F0\n  1F", 2, 5, "expected a microbatch number"},
      {"0F0,F1", 1, 5, "unexpected character"},
      {"0F0B0", 1, 4, "expected ',' or a space"},
      {"(0F0 1B0)", 1, 6, "expected ';'"},
      {"(0F0;1B0", 1, 9, "expected ')'"},
      {"0F99999999", 1, 9, "microbatch number too large"},
      {"\n\n# nothing\n", 1, 1, "no actions"},
      {"chains\n0F0", 1, 7, "expected the number of chains"},
      {"chains 0\n0F0", 1, 9, "at least 1"},
      {"chains 2 0F0", 1, 10, "stands alone"},
      {"chains 2\nchains 2\n0F0", 2, 1, "given twice"},
  };
  for (const bad& b : cases) {
    CAPTURE(b.text);
    const pt::program p = pt::parse_schedule(b.text);
    const pt::verdict v = pt::verify(p.view());
    CHECK(v.code == pt::errc::parse_error);
    CHECK(v.line == b.line);
    CHECK(v.column == b.column);
    CHECK(std::string(v.detail).find(b.why) != std::string::npos);
  }
}
