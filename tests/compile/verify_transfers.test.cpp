#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "../read_file.hpp"

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_verify_transfers {

namespace pt = pipetype;

namespace {
// PyTorch's files live with the notation's tests (tests/io/data/pytorch)
std::string read_data(const char* name) {
  std::string dir = PIPETYPE_TEST_DATA;  // tests/compile/data
  dir.replace(dir.rfind("/compile/data"), 13, "/io/data");
  return read_test_file(dir + "/" + name);
}

// a compute+comms text that verifies, as steps
constexpr const char* good = "0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n";
}  // namespace

// the check runs in constant evaluation too
static_assert(pt::parse_schedule(good).source_error.ok());
static_assert(pt::parse_schedule("0F0,0SEND_F0,0B0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n").source_error.code ==
              pt::errc::action_before_its_input);

TEST_CASE("verify_transfers: the steps of a good file, checked directly") {
  const pt::schedule_file f = pt::read_schedule(good);
  const pt::program p = pt::to_program(f);
  REQUIRE(pt::verify(p.view()).ok());
  CHECK(pt::verify_transfers(p.view(), f.view()).ok());
  // the same steps with one receive dropped: the datum is named on the rank that lacks it
  pt::schedule_file g = f;
  g.steps.erase(g.steps.begin() + 5);  // 1RECV_F0
  for (std::size_t r = 2; r < g.begin.size(); ++r) --g.begin[r];
  const pt::verdict v = pt::verify_transfers(p.view(), g.view());
  CHECK(v.code == pt::errc::missing_action);
  CHECK(pt::describe(v) ==
        "missing action at rank 1, stage 1, microbatch 0, action 1RECV_F0: the activation is never received");
}

// ---- a compute+comms file's own transfers under NCCL's rules ---------------------------------

// (the zb1p artifact is in the older notation without send waits: its order completes, though
// torch 2.15 itself no longer loads it)
TEST_CASE("transfers: PyTorch's own compute+comms files complete") {
  for (const char* name : {"pytorch/interleaved_p2_m4_comms.csv", "pytorch/dualpipev_p2_m4_comms.csv",
                           "pytorch/artifacts/zb1p_2rank_2stagep_comms.csv"}) {
    CAPTURE(name);
    const pt::schedule_file f = pt::read_schedule(read_data(name));
    REQUIRE(f.error.ok());
    CHECK(f.has_transfers());
    const pt::program p = pt::to_program(f);
    CHECK(pt::describe(p.source_error) == "ok");
    CHECK(pt::build_plan(p).ok());
  }
  for (const char* name :
       {"pytorch/dualpipev_p2_m4.csv", "pytorch/zbv_p2_m4.csv", "pytorch/artifacts/dualpipev_4rank_10mb.csv",
        "pytorch/artifacts/zb1p_2rank_2stagep_compute.csv"}) {
    CAPTURE(name);
    CHECK(pt::build_plan(pt::parse_schedule(read_data(name))).ok());
  }
  // the zb1p pair is in the older notation (B next to W is the backward for inputs, BW a full one)
  CHECK(pt::read_schedule(read_data("pytorch/artifacts/zb1p_2rank_2stagep_compute.csv")).form == pt::notation::legacy);
  const pt::program both = pt::parse_schedule(read_data("pytorch/artifacts/zb1p_2rank_2stagep_comms.csv"));
  CHECK(both.actions[static_cast<std::size_t>(both.begin[0] + 4)] == pt::B(2, 0));  // 2BW0
  CHECK(both.actions[static_cast<std::size_t>(both.begin[1] + 3)] == pt::I(3, 0));  // 3B0
}

TEST_CASE("transfers: an order that cannot complete is named where it stops") {
  struct bad {
    const char* text;
    pt::errc code;
    const char* where;
  };
  const bad cases[] = {
      // rank 0's stream waits in RECV_B0 before it sends 0F0: fine over gloo, a hang on NCCL
      {"0F0,0F1,0RECV_B0,0SEND_F0,0SEND_F1,0B0,0RECV_B1,0B1\n"
       "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n",
       pt::errc::nccl_deadlock, "at rank 0, stage 0, microbatch 0, action 0RECV_B0 (index 2)"},
      // rank 0 sends 0F1 first, rank 1 receives 1F0 first: NCCL would swap the tensors
      {"0F0,0F1,0SEND_F1,0SEND_F0,0RECV_B0,0B0,0RECV_B1,0B1\n"
       "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n",
       pt::errc::transfer_mismatch, "at rank 1, stage 1, microbatch 0, action 1RECV_F0"},
      // a receive never issued
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n", pt::errc::missing_action,
       "at rank 1, stage 1, microbatch 0, action 1RECV_F0"},
      // the forward runs before its input is received
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n", pt::errc::action_before_its_input,
       "at rank 1, stage 1, microbatch 0, action 1F0"},
      // a send before the compute that produces it
      {"0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", pt::errc::action_before_its_input,
       "at rank 0, stage 0, microbatch 0, action 0SEND_F0"},
      // a wait before its send
      {"0F0,0WAIT_SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", pt::errc::action_before_its_input,
       "action 0WAIT_SEND_F0"},
      // a transfer on an edge within one rank
      {"0F0,1F0,1SEND_F0,1B0,0B0\n", pt::errc::index_out_of_range, "action 1SEND_F0"},
      // a transfer twice
      {"0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", pt::errc::duplicate_action,
       "action 0SEND_F0"},
      // a transfer out of range
      {"0F0,0SEND_F7,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", pt::errc::index_out_of_range, "action 0SEND_F7"},
      // rank 0's compute stream waits for 0SEND_F1 before its 2RECV_F0 is issued; rank 1 receives
      // 1F1 only after sending 1F0 to that 2RECV_F0: a cycle through a WAIT_SEND placed too early
      {"0F0,0SEND_F0,0F1,0SEND_F1,0WAIT_SEND_F1,2RECV_F0,2F0,2SEND_F0,2RECV_F1,2F1,2SEND_F1,2RECV_B0,2B0,2SEND_B0,"
       "2RECV_B1,2B1,2SEND_B1,0RECV_B0,0B0,0RECV_B1,0B1\n"
       "1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0,3B0,3SEND_B0,3RECV_F1,3F1,3B1,3SEND_B1,1RECV_B0,1B0,"
       "1SEND_B0,1RECV_B1,1B1,1SEND_B1\n",
       pt::errc::nccl_deadlock, "at rank 0, stage 0, microbatch 1, action 0SEND_F1 (index 3)"},
  };
  for (const bad& b : cases) {
    CAPTURE(b.text);
    const pt::program p = pt::parse_schedule(b.text);
    CHECK(p.source_error.code == b.code);
    CAPTURE(pt::describe(p.source_error));
    CHECK(pt::describe(p.source_error).find(b.where) != std::string::npos);
  }
}

TEST_CASE("verify_transfers: the NCCL streams PyTorch puts transfers on") {
  // torch 2.15 with defer_pp_recv=True. Interleaved1F1B p=2: both ranks of the pair send first
  // (2SEND_F1 against 3SEND_B0), a hang on one stream per rank or per peer, fine on one per
  // direction. LoopedBFS p=4: rank 0's stream to rank 1 waits behind one to rank 3 on a shared
  // communicator only.
  struct expect {
    const char* file;
    pt::p2p_streams streams;
    const char* verdict;
  };
  const expect cases[] = {
      {"pytorch/interleaved_p2_m4_comms_deferred.csv", pt::p2p_streams::shared,
       "NCCL deadlock at rank 0, stage 2, microbatch 1, action 2SEND_F1 (index 11)"},
      {"pytorch/interleaved_p2_m4_comms_deferred.csv", pt::p2p_streams::per_peer,
       "NCCL deadlock at rank 0, stage 2, microbatch 1, action 2SEND_F1 (index 11)"},
      {"pytorch/interleaved_p2_m4_comms_deferred.csv", pt::p2p_streams::per_direction, "ok"},
      {"pytorch/looped_bfs_p4_m8_comms_deferred.csv", pt::p2p_streams::shared, "NCCL deadlock at rank 0"},
      {"pytorch/looped_bfs_p4_m8_comms_deferred.csv", pt::p2p_streams::per_peer, "ok"},
      {"pytorch/looped_bfs_p4_m8_comms_deferred.csv", pt::p2p_streams::per_direction, "ok"},
  };
  for (const expect& e : cases) {
    CAPTURE(e.file);
    CAPTURE(pt::p2p_streams_name(e.streams));
    pt::read_options o;
    o.p2p = e.streams;
    const std::string got = pt::describe(pt::parse_schedule(read_data(e.file), o).source_error);
    CAPTURE(got);
    CHECK(got.rfind(e.verdict, 0) == 0);
  }
}

}  // namespace test_verify_transfers
}  // namespace
