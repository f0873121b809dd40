#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>

namespace pt = pipetype;

namespace {
pt::verdict check(const char* text, int mem_limit = 0) {
  return pt::check_program(pt::parse_schedule(text).view(), {mem_limit, {}}).result;
}
void place(const pt::verdict& v, pt::errc code, int rank, int stage, int mb, char kind, int index) {
  CAPTURE(pt::describe(v));
  CHECK(v.code == code);
  CHECK(v.rank == rank);
  CHECK(v.stage == stage);
  CHECK(v.microbatch == mb);
  CHECK(v.kind == kind);
  CHECK(v.index == index);
}
}  // namespace

TEST_CASE("verify: a valid schedule passes and gets lock-step ticks") {
  const pt::program p = pt::parse_schedule("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  const pt::program_facts f = pt::check_program(p.view());
  REQUIRE(f.result.ok());
  CHECK(f.tick == std::vector<int>{0, 1, 3, 5, 1, 2, 3, 4});
  CHECK(f.ticks == 6);
  CHECK(f.peak_units == std::vector<int>{4, 2});
}

TEST_CASE("verify: each category names its place") {
  place(check("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n"), pt::errc::missing_action, 0, 0, 1, 'B', -1);
  place(check("0F0,0F1,0B0,0B1,0F1\n1F0,1B0,1F1,1B1\n"), pt::errc::duplicate_action, 0, 0, 1, 'F', 4);
  place(check("0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1\n"), pt::errc::backward_before_forward, 0, 0, 1, 'B', 1);
  place(check("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n"), pt::errc::cross_rank_deadlock, 0, 0, 0, 'B', 1);
  // stage 1 is first named on rank 0, so rank 1's use of it is the second rank
  place(check("0F0,0F1,0B0,0B1,1F1\n1F0,1B0,1B1\n"), pt::errc::stage_on_two_ranks, 1, 1, 0, 'F', 0);
  place(check("0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n", 2), pt::errc::memory_limit_exceeded, 0, 0, 2, 'F',
        2);
  place(check("0F0,0I0,0B0\n"), pt::errc::mixed_backward, 0, 0, 0, 'I', -1);
  place(check("0F0,0I0\n"), pt::errc::missing_action, 0, 0, 0, 'W', -1);
  place(check("0F0,0W0,0I0\n"), pt::errc::action_before_its_input, 0, 0, 0, 'W', 1);
  place(check("0F0,1F0,1B0,0B0\n1F1\n"), pt::errc::stage_on_two_ranks, 1, 1, 1, 'F', 0);
  place(check("1F0,0F0,1B0,0B0\n"), pt::errc::action_before_its_input, 0, 1, 0, 'F', 0);
  place(check("0F0,(0F1;0F2),0B0,0B1,0B2\n"), pt::errc::invalid_overlap, 0, 0, 1, 'F', 1);
  place(check("0F0,0I0,(0F1;0W0),0B1\n"), pt::errc::invalid_overlap, 0, 0, 1, 'F', 2);
  place(check("0F0,0B0,(0F1\n"), pt::errc::parse_error, -1, -1, -1, '?', -1);
}

TEST_CASE("verify: indices and sizes") {
  pt::program_builder b{1, 1, 1};
  b.rank(0).add(pt::F(0, 0)).add(pt::B(0, 0)).add(pt::F(0, 3));
  const pt::verdict v = pt::verify(std::move(b).build().view());
  CHECK(v.code == pt::errc::index_out_of_range);
  CHECK(v.index == 2);
  CHECK(std::string(v.detail) == "microbatch out of range");
  CHECK(pt::verify(pt::program_builder{0, 1, 1}.build().view()).code == pt::errc::empty_program);
  pt::program_builder c{1, 1, 1};
  c.rank(3).add(pt::F(0, 0));
  CHECK(pt::verify(std::move(c).build().view()).code == pt::errc::rank_out_of_range);
}

TEST_CASE("verify: describe says what and where in one sentence") {
  CHECK(pt::describe(check("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n")) ==
        "cross-rank deadlock at rank 0, stage 0, microbatch 0, action 0B0 (index 1): waits for an input that a rank "
        "produces only after it");
  CHECK(pt::describe(check("0F0,0Q0")) ==
        "parse error at line 1, column 6: expected F, B, I or W after the stage (or a PyTorch kind: SEND_F, RECV_B, "
        "UNSHARD, ...)");
  CHECK(pt::describe(pt::verdict{}) == "ok");
}

TEST_CASE("verify: an overlapped F&B pair runs in one tick") {
  const pt::program p = pt::parse_schedule("0F0,0F1,(0F2;1B0),0B1,0B2\n1F0,1F1,1B1,1F2,1B2\n");
  // stage 1 on rank 1, but 1B0 is on rank 0: rejected; move it to a valid pair instead
  CHECK(pt::verify(p.view()).code == pt::errc::stage_on_two_ranks);
  const pt::program q = pt::parse_schedule("0F0,0F1,0F2,(0F3;0B0),0B1,0B2,0B3\n");
  const pt::program_facts f = pt::check_program(q.view());
  REQUIRE(f.result.ok());
  CHECK(f.tick[3] == f.tick[4]);
}

TEST_CASE("verify: sizes past pipetype::limits are too_large, named, before any table is made") {
  auto code_of = [](int ranks, int stages, int microbatches) {
    pt::program_builder b{ranks, stages, microbatches};
    b.rank(0).add(pt::F(0, 0)).add(pt::B(0, 0));
    const pt::program p = std::move(b).build();
    return pt::verify(p.view());
  };
  CHECK(code_of(pt::limits::ranks + 1, 1, 1).code == pt::errc::too_large);
  CHECK(code_of(1, pt::limits::stages + 1, 1).code == pt::errc::too_large);
  CHECK(code_of(1, 1, pt::limits::microbatches + 1).code == pt::errc::too_large);
  const pt::verdict cells = code_of(1, 4096, 2048);  // each within its own limit, the product not
  CHECK(cells.code == pt::errc::too_large);
  CHECK(pt::describe(cells) == "program too large: stages x microbatches above 4194304 (pipetype::limits::cells)");
  CHECK(code_of(1, 2048, 2048).code != pt::errc::too_large);  // 4194304 cells: at the limit, checked as usual
  // the dozen-byte file of a hostile user: refused, not a bad_alloc
  const pt::program huge = pt::parse_schedule("0F0,1000000F1000000");
  CHECK(pt::verify(huge.view()).code == pt::errc::too_large);
  CHECK(!pt::build_plan(huge).ok());
}
