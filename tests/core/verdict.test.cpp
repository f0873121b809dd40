// core/verdict.hpp: a verdict as one sentence naming the place.
#include <pipetype/core/verdict.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_verdict {

namespace pt = pipetype;

TEST_CASE("verdict: every code has a name") {
  for (int c = 0; c < pt::errc_count; ++c) CHECK(std::string(pt::errc_name(static_cast<pt::errc>(c))) != "unknown");
  CHECK(pt::errc_count == static_cast<int>(pt::errc::memory_action_misplaced) + 1);  // the table's last row
  CHECK(std::string(pt::errc_name(static_cast<pt::errc>(pt::errc_count))) == "unknown");
}

TEST_CASE("verdict: describe lists only the parts that are known") {
  pt::verdict v;
  v.code = pt::errc::missing_action;
  v.rank = 1;
  v.stage = 1;
  v.microbatch = 3;
  v.kind = 'B';
  CHECK(pt::describe(v) == "missing action at rank 1, stage 1, microbatch 3, action 1B3");
  v.detail = "no backward";
  v.index = 2;
  CHECK(pt::describe(v) == "missing action at rank 1, stage 1, microbatch 3, action 1B3 (index 2): no backward");
}

}  // namespace test_verdict
}  // namespace
