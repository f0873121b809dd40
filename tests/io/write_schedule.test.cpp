// io/write_schedule.hpp: the notation written (reading it back is tests/io/notation.test.cpp's
// round trips) and what torch's loader would make of a file.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "../read_file.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_write_schedule {

namespace pt = pipetype;

std::string read_data(const char* name) { return read_test_file(std::string(PIPETYPE_TEST_DATA) + "/" + name); }

TEST_CASE("to_text: PyTorch's action notation") {
  CHECK(pt::to_text(pt::F(2, 0)) == "2F0");
  CHECK(pt::to_text(pt::I(13, 7)) == "13I7");
  CHECK(pt::to_text(pt::make_one_f_one_b(2, 2).view()) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

TEST_CASE("to_text: an overlapped pair") {
  pt::program_builder b{1, 1, 2};
  b.rank(0).add(pt::F(0, 0)).add_overlapped(pt::F(0, 1), pt::B(0, 0)).add(pt::B(0, 1));
  CHECK(pt::to_text(std::move(b).build().view()) == "0F0,(0F1;0B0)OVERLAP_F_B,0B1\n");
}

TEST_CASE("notation: what torch 2.15's loader does with a file") {
  struct expect {
    std::string text;
    const char* note;  // "" when torch loads it as pipetype reads it
  };
  const std::string good_comms =
      "0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1WAIT_SEND_B0\n";
  const expect cases[] = {
      {good_comms, ""},
      {read_data("pytorch/interleaved_p2_m4_comms.csv"), ""},
      {read_data("pytorch/dualpipev_p2_m4_comms.csv"), ""},
      {read_data("pytorch/zbv_p2_m4.csv"), ""},  // idle cells are fine in compute-only files
      {read_data("pytorch/dualpipev_p2_m4.csv"), ""},
      {read_data("pytorch/1f1b_p2_m4.csv"), "compute_only loader refuses anything but computes: rank 0's 0REDUCE_GRAD"},
      {read_data("pytorch/artifacts/zb1p_2rank_2stagep_compute.csv"), "older notation"},
      {"0F0,(0F1;0B0),0B1\n", "pair without OVERLAP_F_B (line 1, column 5)"},
      {"0F0 0F1,0B0,0B1\n", "one action per cell and ignores the rest of this one (line 1, column 5)"},
      {"\"0F0,0F1\",0B0,0B1\n", "one action per cell"},
      {"0SEND_F0_1RECV_B0\n", "one action per cell"},
      {"0F0,0B0\n\n1F0,1B0\n", "a blank line is a rank with no actions (line 2, column 1)"},
      {"# two ranks\n0F0,0B0\n", "no comments (line 1, column 1)"},
      {"0F0,0SEND_F0,,0RECV_B0,0B0,0WAIT_SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n",
       "refuses empty (idle) cells (line 1, column 14)"},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n",
       "exactly one WAIT_SEND_F after each send, and rank 0's 0SEND_F0 has 0"},
      {"0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0\n0UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n",
       "rank 1's 0UNSHARD is on another rank than its stage"},
      {"0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,0REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n",
       "one pending REDUCE_GRAD, and rank 0's 0REDUCE_GRAD is a second"},
      {"0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n",
       "a WAIT_REDUCE_GRAD for rank 0's REDUCE_GRAD of stage 0"},
  };
  for (const expect& e : cases) {
    CAPTURE(e.text);
    const pt::schedule_file f = pt::read_schedule(e.text);
    REQUIRE(f.error.ok());
    const pt::csv_format format = f.has_transfers() ? pt::csv_format::compute_comms : pt::csv_format::compute_only;
    const std::string note = pt::torch_load_note(f, pt::to_program(f).view(), format);
    CAPTURE(note);
    if (*e.note == 0)
      CHECK(note.empty());
    else
      CHECK(note.find(e.note) != std::string::npos);
  }
}

TEST_CASE("write_schedule: a rank with no actions is written so that it reads back as a rank") {
  // the fuzzer's find: a file whose first row is idle ran on 4 ranks, and its mesh step's CSV read
  // back on 3 (a blank line is no rank), its collectives then on the wrong ranks
  const pt::schedule_file f = pt::read_schedule(",\n0F0,0B0\n1F0,1B0\n2F0,2B0\n");
  REQUIRE(f.error.ok());
  const pt::runtime_plan plan = pt::build_plan(pt::to_program(f));
  REQUIRE(plan.ok());
  REQUIRE(plan.compute().ranks == 4);
  const std::string compute_only = pt::to_csv(plan.compute());
  CHECK(compute_only.rfind(",\n", 0) == 0);
  const pt::program again = pt::to_program(pt::read_schedule(compute_only));
  CHECK(again.ranks == 4);
  CHECK(std::equal(again.actions.begin(), again.actions.end(), plan.compute().actions.begin(),
                   plan.compute().actions.end()));
  for (const bool shard : {false, true}) {
    CAPTURE(shard);
    const pt::dp_options o{.dp = 2, .shard = shard};
    const pt::collective_program c = pt::place_collectives(plan.compute(), o);
    const pt::schedule_file back = pt::read_schedule(pt::to_csv(plan.compute(), plan.lowered(), c));
    REQUIRE(back.error.ok());
    CHECK(back.rows == 4);
    CHECK(pt::check_collectives(plan.compute(), pt::collectives_of(back, 4), o).ok());
  }
}

}  // namespace test_write_schedule
}  // namespace
