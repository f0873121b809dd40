#include <pipetype/compile/lower.hpp>
#include <pipetype/compile/packed_ops.hpp>
#include <pipetype/compile/plan.hpp>
#include <pipetype/schedules/registry.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_packed_ops {

namespace pt = pipetype;

// An op with every field drawn from `pick` (mostly -1 and small numbers, some far apart).
pt::lowered_op random_op(std::mt19937& rng) {
  const auto pick = [&]() -> int {
    switch (rng() % 6) {
      case 0:
        return -1;
      case 1:
        return static_cast<int>(rng() % 8);
      case 2:
        return static_cast<int>(rng() % 70000);
      case 3:
        return static_cast<int>(rng());  // any int, INT_MIN to INT_MAX
      case 4:
        return rng() % 2 ? INT_MAX : INT_MIN;
      default:
        return -2 - static_cast<int>(rng() % 100);  // negative, but not "unset"
    }
  };
  pt::lowered_op o;
  o.code = static_cast<pt::op_code>(rng() % 5);
  o.stream = static_cast<pt::stream_id>(rng() % 2);
  o.what = static_cast<pt::kind>(rng() % 4);
  o.overlapped = rng() % 2 != 0;
  o.stage = pick(), o.microbatch = pick(), o.peer = pick(), o.comm = pick(), o.slot = pick();
  o.grad_slot = pick(), o.out_slot = pick(), o.wait_event = pick(), o.record_event = pick(), o.tick = pick();
  o.link = pick(), o.stash_slot = pick(), o.weight_grad_slot = pick();
  return o;
}

TEST_CASE("packed ops: every field comes back as written, in every block and chunk") {
  std::mt19937 rng(7);
  std::vector<pt::lowered_op> plain;
  pt::packed_ops packed;
  // wide ops (about 40 bytes each) fill more than one 1 MiB chunk
  for (int i = 0; i < 40000; ++i) {
    plain.push_back(random_op(rng));
    packed.push_back(plain.back());
  }
  REQUIRE(packed.size() == plain.size());
  CHECK(packed.bytes() > pt::packed_ops::chunk_bytes);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const pt::lowered_op got = packed[i];
    REQUIRE_MESSAGE(got == plain[i], "op ", i);
    REQUIRE(packed.code(i) == plain[i].code);  // read alone, without decoding the rest
    REQUIRE(packed.peer(i) == plain[i].peer);
  }
  // read backwards and at random too: no op depends on reading the one before
  for (std::size_t i = plain.size(); i-- > 0;) REQUIRE(packed[i] == plain[i]);
  for (int k = 0; k < 1000; ++k) {
    const std::size_t i = rng() % plain.size();
    REQUIRE(packed[i] == plain[i]);
  }
}

TEST_CASE("packed ops: op_span reads the packed and the plain form alike") {
  std::mt19937 rng(11);
  std::vector<pt::lowered_op> plain;
  pt::packed_ops packed;
  for (int i = 0; i < 700; ++i) {
    plain.push_back(random_op(rng));
    packed.push_back(plain.back());
  }
  const pt::op_span a = plain, b = packed;
  REQUIRE(a.size() == b.size());
  CHECK(a.plain() == plain.data());
  CHECK(b.plain() == nullptr);
  CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  CHECK(a.front() == b.front());
  CHECK(a.back() == b.back());
  // a subspan crossing two block boundaries, its iterators and their arithmetic
  const pt::op_span sa = a.subspan(250, 300), sb = b.subspan(250, 300);
  REQUIRE(sb.size() == 300);
  CHECK(std::equal(sa.begin(), sa.end(), sb.begin(), sb.end()));
  CHECK(sb[0] == plain[250]);
  CHECK(sb.end() - sb.begin() == 300);
  CHECK(*(sb.begin() + 299) == plain[549]);
  CHECK(sb.begin()[7] == plain[257]);
  CHECK(b.subspan(690).size() == 10);
  const auto count = std::count_if(b.begin(), b.end(), [](const pt::lowered_op& o) { return o.overlapped; });
  CHECK(count == std::count_if(plain.begin(), plain.end(), [](const pt::lowered_op& o) { return o.overlapped; }));
  static_assert(std::random_access_iterator<pt::op_span::iterator>);
  CHECK(pt::op_span{}.empty());
}

// The plan's ops against lower()'s, op for op, and the verdicts on both forms.
void same_as_lower(const pt::runtime_plan& plan, const char* name) {
  REQUIRE_MESSAGE(plan.ok(), name);
  const pt::lowered_program plain = pt::lower(plan.compute(), plan.facts.tick);
  const pt::lowered_program copy = pt::copy_of(plan.lowered());
  CHECK_MESSAGE(copy.ops == plain.ops, name);
  CHECK(copy.begin == plain.begin);
  CHECK(copy.comms == plain.comms);
  CHECK(copy.resources == plain.resources);
  bool packed_cert = false, plain_cert = false;
  CHECK(pt::verify_lowered(plan.lowered(), &packed_cert).ok());
  CHECK(pt::verify_lowered(plain.view(), &plain_cert).ok());
  CHECK(packed_cert == plain_cert);
}

TEST_CASE("packed ops: a small plan keeps its ops plain, exactly the ones lower() makes") {
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "v-min",
                           "v-half", "dualpipe-v", "dualpipe"}) {
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 4, 16));  // its own stages per rank
    CHECK(plan.lowered_table.ops.is_plain());
    CHECK(plan.ops().plain() != nullptr);
    same_as_lower(plan, name);
  }
}

TEST_CASE("packed ops: a large plan packs them, in a fifth of their bytes") {
  for (const char* name : {"gpipe", "zb-v"}) {
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 8, 2048));
    const std::size_t ops = plan.ops().size();
    REQUIRE(ops >= pt::packed_ops::plain_below);
    CHECK_FALSE(plan.lowered_table.ops.is_plain());
    CHECK(plan.ops().plain() == nullptr);
    CHECK_MESSAGE(plan.lowered_table.ops.bytes() <= ops * 14, name, ": ", plan.lowered_table.ops.bytes(), " bytes for ",
                  ops, " ops");
    same_as_lower(plan, name);
  }
}

TEST_CASE("packed ops: a broken packed program is refused as its plain copy is") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 3, 6));
  REQUIRE(plan.ok());
  pt::lowered_program bad = pt::copy_of(plan.lowered());
  const auto send =
      std::find_if(bad.ops.begin(), bad.ops.end(), [](const pt::lowered_op& o) { return o.code == pt::op_code::send; });
  REQUIRE(send != bad.ops.end());
  send->code = pt::op_code::recv;  // both ends now receive
  pt::packed_program repacked;
  repacked.ranks = bad.ranks, repacked.policy = bad.policy, repacked.begin = bad.begin, repacked.comms = bad.comms;
  repacked.resources = bad.resources, repacked.slot_lists = bad.slot_lists;
  for (const pt::lowered_op& o : bad.ops) repacked.ops.push_back(o);
  const pt::verdict plain = pt::verify_lowered(bad.view()), packed = pt::verify_lowered(repacked.view());
  CHECK(plain.code == pt::errc::transfer_mismatch);
  CHECK(pt::describe(packed) == pt::describe(plain));
}

TEST_CASE("packed ops: without a tick certificate, the simulation proves a packed program too") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("zb-h1", 3, 6));
  REQUIRE(plan.ok());
  pt::lowered_program L = pt::copy_of(plan.lowered());
  for (pt::lowered_op& o : L.ops) o.tick = -1;  // no certificate
  pt::packed_program P;
  P.ranks = L.ranks, P.policy = L.policy, P.begin = L.begin, P.comms = L.comms, P.resources = L.resources;
  for (const pt::lowered_op& o : L.ops) P.ops.push_back(o);
  bool cert = true;
  CHECK(pt::verify_lowered(P.view(), &cert).ok());
  CHECK_FALSE(cert);
}

}  // namespace test_packed_ops
}  // namespace
