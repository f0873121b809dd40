#include <pipetype/graph/layer_layout.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_layer_layout {

namespace pt = pipetype;

namespace {
using five = pt::layout<"E|t*3|t*4|t*4|t*3,L">;
static_assert(five::stages == 5);
static_assert(five::stage(0) == pt::stage_layers{1, 0, 0, 0} && five::stage(4) == pt::stage_layers{0, 3, 0, 1});
// Megatron's DeepSeek-V3 example (PP16 × VPP2): E + 3 layers, 29 stages of 2, an MTP layer, the loss
static_assert(pt::layout<"Et*3|(tt|)*29,m|L">::stages == 32);
static_assert(pt::parse_layout("Et*3|(tt|)*29,m|L").layers() == 3 + 58 + 1);

pt::verdict error_of(const char* text) { return pt::parse_layout(text).error; }
}  // namespace

TEST_CASE("layer_layout: stages, repeats, groups and empty stages") {
  const pt::layer_layout l = pt::parse_layout("E|t*3|t*4|t*4|t*3,L");
  REQUIRE(l.ok());
  REQUIRE(l.size() == 5);
  const int decoders[] = {0, 3, 4, 4, 3};
  for (int s = 0; s < 5; ++s) CHECK(l.stages[static_cast<std::size_t>(s)].decoder == decoders[s]);
  CHECK(l.stages[0].embedding == 1);
  CHECK(l.stages[4].loss == 1);
  CHECK(l.layers() == 14);

  const pt::layer_layout e = pt::parse_layout("Et||t t,t|L");  // an empty stage; blanks and commas mean nothing
  REQUIRE(e.ok());
  REQUIRE(e.size() == 4);
  CHECK(e.stages[1].layers() == 0);
  CHECK(e.stages[2].decoder == 3);

  const pt::layer_layout g = pt::parse_layout("E(t|)*2t*0|(m)*2L");  // a group with '|', a zero count
  REQUIRE(g.ok());
  REQUIRE(g.size() == 4);  // E t | t | (t*0) | m m L
  CHECK(g.stages[0] == pt::stage_layers{1, 1, 0, 0});
  CHECK(g.stages[1] == pt::stage_layers{0, 1, 0, 0});
  CHECK(g.stages[2].layers() == 0);
  CHECK(g.stages[3] == pt::stage_layers{0, 0, 2, 1});
  CHECK(pt::parse_layout("t|*3t").size() == 4);                    // a repeated '|' makes empty stages
  CHECK(pt::parse_layout("((t*2)*3|)*2").stages[1].decoder == 6);  // nested groups
}

TEST_CASE("layer_layout: a bad string names its column and why") {
  struct expect {
    const char* text;
    int column;
    const char* why;
  };
  const expect cases[] = {
      {"E|tx|L", 4, "not a layer: E (embedding), t (decoder layer), m (MTP layer), L (loss), '|' ends a stage"},
      {"E|(*3)", 4, "a '*' after nothing to repeat"},
      {"E|t*|L", 5, "a '*' needs a count"},
      {"E|(tt|L", 8, "a '(' is not closed"},
      {"E|t)|L", 4, "a ')' without its '('"},
      {"(t*1000)*1000", 1, "the layout is too long once expanded (65536 tokens at most)"},
      {"t*99999999999", 1, "the layout is too long once expanded (65536 tokens at most)"},
      {"t|E|t", 6, "the embedding (E) must be in the first stage"},
      {"t|L|t", 6, "the loss (L) must be in the last stage"},
      {"EE|t", 5, "the layout has more than one embedding (E)"},
      {"t|LL", 5, "the layout has more than one loss (L)"},
      {"||", 3, "the layout has no layers"},
  };
  for (const expect& c : cases) {
    const std::string text = c.text;
    CAPTURE(text);
    const pt::verdict v = error_of(c.text);
    CHECK(v.code == pt::errc::parse_error);
    CHECK(v.line == 1);
    CHECK(v.column == c.column);
    CHECK(std::string(v.detail) == c.why);
    CHECK(pt::parse_layout(c.text).stages.empty());
  }
}

TEST_CASE("layer_layout: weights") {
  const pt::layer_weights w{};
  CHECK(w.of({1, 0, 0, 0}) == 0.5);
  CHECK(w.of({0, 3, 0, 1}) == 4);
  CHECK(pt::layer_weights{.embedding = 0, .decoder = 2, .mtp = 3, .loss = 0}.of({1, 1, 1, 1}) == 5);
}

}  // namespace test_layer_layout
}  // namespace
