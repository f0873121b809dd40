#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "../read_file.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_notation {

namespace pt = pipetype;

using hand_1f1b = pt::from_text<R"(
  # rank 0: warm up with one forward
  0F0, 0F1, 0B0, 0B1
  1F0 1B0 1F1 1B1
)">;
constexpr auto plan = pt::make_plan<hand_1f1b>();
static_assert(plan.ranks == 2 && plan.stages == 2 && plan.microbatches == 2);
static_assert(plan.compute().actions[4] == pt::F(1, 0));

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
    CHECK(q.lanes == p.lanes);
    CHECK(pt::build_plan(q).ok());
  }
}

// DualPipe's two directions in text: a `lanes 2` line (here PP = 2, m = 4: lane 0 is stages 0-1
// with microbatches 0-1, lane 1 is stages 2-3 with microbatches 2-3, stage 2 on rank 1)
using two_way = pt::from_text<R"(
  lanes 2
  0F0,0F1,3F2,3F3,0B0,0B1,3B2,3B3
  1F0,1F1,2F2,2F3,1B0,1B1,2B2,2B3
)">;
static_assert(pt::make_plan<two_way>().lanes == 2);

TEST_CASE("text: lanes") {
  const pt::program p = pt::parse_schedule("lanes 2  # two directions\n0F0,1F1\n");
  REQUIRE(p.source_error.ok());
  CHECK(p.lanes == 2);
  CHECK(pt::to_text(p.view()).rfind("lanes 2\n", 0) == 0);
  // a microbatch on the other chain's stage is refused by verify
  CHECK(pt::verify(pt::parse_schedule("lanes 2\n0F1,0B1\n1F0,1B0\n").view()).code == pt::errc::index_out_of_range);
  // lanes and edges together (DualPipe over a graph): a copy of the graph per lane, and back
  const pt::program dual = pt::make_dualpipe(4, 8, pt::stage_dag{4, {{0, 2}, {1, 2}, {2, 3}}});
  const std::string text = pt::to_text(dual.view());
  CHECK(text.rfind("lanes 2\nedges 0>2, 1>2, 2>3, 4>6, 5>6, 6>7\n", 0) == 0);
  const pt::program back = pt::parse_schedule(text);
  CHECK(back.lanes == 2);
  CHECK(back.edges == dual.edges);
  CHECK(back.actions == dual.actions);
  CHECK(pt::verify(back.view()).ok());
}

TEST_CASE("text: edges") {
  const pt::program p = pt::parse_schedule("edges 0>1, 1>2,0 > 2  # a skip connection\n0F0,0B0\n1F0,1B0\n2F0,2B0\n");
  REQUIRE(p.source_error.ok());
  CHECK(p.edges == std::vector<pt::stage_edge>{{0, 1}, {1, 2}, {0, 2}});
  CHECK(pt::verify(p.view()).ok());
  const std::string text = pt::to_text(p.view());
  CHECK(text.rfind("edges 0>1, 1>2, 0>2\n", 0) == 0);
  const pt::program q = pt::parse_schedule(text);  // and back
  CHECK(q.edges == p.edges);
  CHECK(q.actions == p.actions);
  // PyTorch's files hold chains only
  CHECK_THROWS_WITH_AS(pt::to_csv(p.view()), doctest::Contains("its stage graph is given as edges"),
                       std::invalid_argument);
  const pt::schedule_file f = pt::read_schedule("edges 0>1\n0F0,0B0\n1F0,1B0\n");
  CHECK(pt::torch_load_note(f, pt::to_program(f).view(), pt::csv_format::compute_only).find("no `edges` line") !=
        std::string::npos);
  // a file's own transfers are checked along a chain: not with an `edges` line yet
  const pt::program sends = pt::parse_schedule("edges 0>1\n0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
  CHECK(sends.source_error.code == pt::errc::parse_error);
  CHECK(std::string(sends.source_error.detail).find("cannot list its own transfers yet") != std::string::npos);
  // the graph's rules, from verify
  CHECK(pt::verify(pt::parse_schedule("edges 0>1, 1>0\n0F0,0B0\n1F0,1B0\n").view()).code == pt::errc::invalid_graph);
}

TEST_CASE("text: syntax errors name line and column") {
  struct bad {
    const char* text;
    int line, column;
    const char* why;
  };
  const bad cases[] = {
      {"0F0,0X0", 1, 6, "expected F, B, I or W after the stage (or a PyTorch kind"},
      {"0F0\n  1F", 2, 5, "expected a microbatch number"},
      {"0F0,F1", 1, 5, "unexpected character"},
      {"0F0B0", 1, 4, "expected ',' or a space"},
      {"(0F0 1B0)", 1, 6, "expected ';'"},
      {"(0F0;1B0", 1, 9, "expected ')'"},
      {"0F99999999", 1, 9, "number too large"},
      {"\n\n# nothing\n", 1, 1, "no actions"},
      {"lanes\n0F0", 1, 6, "expected the number of lanes"},
      {"lanes 0\n0F0", 1, 8, "at least 1"},
      {"lanes 2 0F0", 1, 9, "stands alone"},
      {"chains 2 0F0", 1, 10, "stands alone"},  // the older spelling reads the same
      {"lanes 2\nchains 2\n0F0", 2, 1, "given twice"},
      {"edges\n0F0", 1, 6, "expected an edge `A>B`"},
      {"edges 0-1\n0F0", 1, 8, "expected `>` (or `~`, detached: no gradient back) between the two stages"},
      {"edges 0>\n0F0", 1, 9, "expected the stage an edge goes to"},
      {"edges 0>1,\n0F0", 1, 11, "expected an edge `A>B`"},
      {"edges 0>1 1>2\n0F0", 1, 11, "stands alone on its line"},
      {"edges 0>1\nedges 1>2\n0F0", 2, 1, "`edges` given twice"},
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

// ---- PyTorch's notation: every kind torch 2.15 writes --------------------------------------

namespace {
std::string read_data(const char* name) { return read_test_file(std::string(PIPETYPE_TEST_DATA) + "/" + name); }
}  // namespace

TEST_CASE("notation: transfers, waits and markers are steps in file order") {
  const pt::schedule_file f = pt::read_schedule(
      "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\n"
      "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0\n");
  REQUIRE(f.error.ok());
  CHECK(f.rows == 2);
  CHECK(f.transfers == 4);
  CHECK(f.waits == 2);
  CHECK(f.markers == 8);
  CHECK(f.steps[0] == pt::step{pt::step_kind::unshard, pt::kind::F, 0, -1, false, 0});
  CHECK(f.steps[2] == pt::step{pt::step_kind::send_f, pt::kind::F, 0, 0, false, 2});
  CHECK(f.steps[5] == pt::step{pt::step_kind::wait_send_f, pt::kind::F, 0, 0, false, 5});
  CHECK(f.steps[17] == pt::step{pt::step_kind::wait_send_b, pt::kind::F, 1, 0, false, 8});
  // the compute program keeps only F/B/I/W, and the transfers as written complete
  const pt::program p = pt::to_program(f);
  REQUIRE(p.source_error.ok());
  CHECK(p.actions == std::vector<pt::action>{pt::F(0, 0), pt::B(0, 0), pt::F(1, 0), pt::B(1, 0)});
  CHECK(pt::build_plan(p).ok());
  // and print back as they were read
  CHECK(pt::read_schedule(pt::to_csv(f.view())).steps == f.steps);
}

TEST_CASE("notation: compound actions, with and without OVERLAP_F_B") {
  for (const char* text : {"0F0,0F1,(0F2;1B0)OVERLAP_F_B", "0F0,0F1,( 0F2 ; 1B0 )"}) {
    CAPTURE(text);
    const pt::program p = pt::parse_schedule(text);
    REQUIRE(p.source_error.ok());
    REQUIRE(p.actions.size() == 4);
    CHECK(p.actions[2].overlapped);
    CHECK(p.actions[3] == pt::B(1, 0));
  }
  CHECK(pt::to_csv(pt::read_schedule("(0F2;1B0)").view()) == "(0F2;1B0)OVERLAP_F_B\n");
  struct bad {
    const char* text;
    int column;
    const char* why;
  };
  for (const bad& b :
       {bad{"(0F2;1B0)OVERLAP", 10, "(a;b)OVERLAP_F_B"}, bad{"(0F2;1B0;2B0)OVERLAP_F_B", 9, "two computes"},
        bad{"(0F2;1SEND_F0)OVERLAP_F_B", 6, "two computes"}}) {
    CAPTURE(b.text);
    const pt::schedule_file f = pt::read_schedule(b.text);
    CHECK(f.error.code == pt::errc::parse_error);
    CHECK(f.error.column == b.column);
    CHECK(std::string(f.error.detail).find(b.why) != std::string::npos);
  }
}

TEST_CASE("notation: the older notation (B = backward for inputs next to W, BW = full backward)") {
  // detected: B and W without I
  pt::schedule_file f = pt::read_schedule("0F0,0F1,0B0,0W0,0B1,0W1\n");
  REQUIRE(f.error.ok());
  CHECK(f.form == pt::notation::legacy);
  CHECK(pt::to_program(f).actions[2] == pt::I(0, 0));
  // detected: BW
  f = pt::read_schedule("0F0,0BW0\n");
  CHECK(f.form == pt::notation::legacy);
  CHECK(pt::to_program(f).actions[1] == pt::B(0, 0));
  // current: B, or I with W
  CHECK(pt::read_schedule("0F0,0B0\n").form == pt::notation::current);
  CHECK(pt::read_schedule("0F0,0I0,0W0,0F1,0B1\n").form == pt::notation::current);
  // forced either way
  CHECK(pt::to_program(pt::read_schedule("0F0,0B0\n", pt::notation::legacy)).actions[1] == pt::I(0, 0));
  f = pt::read_schedule("0F0,0BW0\n", pt::notation::current);
  CHECK(f.error.code == pt::errc::parse_error);
  CHECK(f.error.column == 6);
  CHECK(std::string(f.error.detail).find("legacy") != std::string::npos);
  // older copies fused two transfers in one cell
  f = pt::read_schedule("0F0,0SEND_F0_0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
  REQUIRE(f.error.ok());
  CHECK(f.transfers == 4);
  CHECK(f.steps[1].op == pt::step_kind::send_f);
  CHECK(f.steps[2].op == pt::step_kind::recv_b);
  CHECK(pt::to_program(f).source_error.ok());
}

TEST_CASE("notation: empty cells, CRLF, quotes and blank lines") {
  const pt::program p = pt::parse_schedule("0F0,,0F1,\"0B0\",0B1,\r\n\r\n,1F0,1B0,,1F1,1B1\r\n");
  REQUIRE(p.source_error.ok());
  CHECK(p.ranks == 2);
  CHECK(p.actions.size() == 8);
  CHECK(pt::build_plan(p).ok());
  // a row of empty cells is a rank with no actions (PyTorch's csv reader sees one too)
  CHECK(pt::read_schedule("0F0,0B0\n,,\n").rows == 2);
}

TEST_CASE("notation: given sizes name an out-of-range index where it is") {
  // torch 2.15's Schedule1F1B._get_pipeline_order starts the last rank's forwards at microbatch 1
  const std::string text = read_data("pytorch/1f1b_p2_m4.csv");
  pt::read_options o;
  o.microbatches = 4;
  pt::verdict v = pt::verify(pt::parse_schedule(text, o).view());
  CHECK(v.code == pt::errc::index_out_of_range);
  CHECK(pt::describe(v).find("at rank 1, stage 1, microbatch 4, action 1F4") != std::string::npos);
  // inferred, the same file has five microbatches and misses 1F0 instead
  v = pt::verify(pt::parse_schedule(text).view());
  CHECK(v.code == pt::errc::missing_action);
  // more rows than ranks given
  o = {};
  o.ranks = 1;
  v = pt::verify(pt::parse_schedule("0F0,0B0\n1F0,1B0\n", o).view());
  CHECK(v.code == pt::errc::rank_out_of_range);
  CHECK(v.rank == 1);
}

// ---- round trips: every built-in schedule PyTorch can express, both formats -----------------

TEST_CASE("notation: read(write(x)) == x for every built-in schedule, compute-only and compute+comms") {
  for (const pt::schedule_info& s : pt::schedule_infos) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {4, 8}) {
        const int v = pt::default_chunks(s);
        if (pt::schedule_error(s.name, p, m, v)) continue;
        CAPTURE(s.name);
        CAPTURE(p);
        CAPTURE(m);
        for (pt::group_policy g : {pt::group_policy::per_tick, pt::group_policy::per_peer}) {
          pt::plan_options o;
          o.groups = g;
          const pt::runtime_plan built = pt::build_plan(pt::make_schedule(s.name, p, m, v), o);
          REQUIRE(built.ok());
          const pt::program_view c = built.compute();
          if (c.lanes > 1 || c.has_detached()) {  // DualPipe: two model copies; local learning: a loss per
                                                  // stage. PyTorch holds neither
            CHECK_THROWS_WITH_AS(pt::to_csv(c), doctest::Contains("cannot express"), std::invalid_argument);
            CHECK_THROWS_AS(pt::to_csv(c, built.lowered()), std::invalid_argument);
            continue;
          }
          const pt::program q = pt::parse_schedule(pt::to_csv(c));
          REQUIRE(q.source_error.ok());
          CHECK(q.actions == built.compute_table.actions);
          CHECK(q.begin == built.compute_table.begin);
          const pt::schedule_file written = pt::file_of(c, built.lowered());
          CHECK(pt::verify_transfers(c, written.view()).ok());
          const std::string csv = pt::to_csv(c, built.lowered());
          const pt::schedule_file read = pt::read_schedule(csv);
          REQUIRE(read.error.ok());
          CHECK(read.steps == written.steps);
          CHECK(read.begin == written.begin);
          const pt::program r = pt::to_program(read);
          CHECK(pt::describe(r.source_error) == "ok");
          CHECK(r.actions == built.compute_table.actions);
          // and torch 2.15's loader takes both files as they are
          CHECK(pt::torch_load_note(read, r.view(), pt::csv_format::compute_comms) == "");
          CHECK(pt::torch_load_note(pt::read_schedule(pt::to_csv(c)), q.view(), pt::csv_format::compute_only) == "");
        }
      }
    }
  }
}

TEST_CASE("notation: compute+comms files complete one transfer at a time, whatever the order inside a group") {
  // Inside one NCCL group the order of sends and receives does not matter; PyTorch issues each
  // transfer alone, so the writer orders them itself. Reversing the groups' transfers on the even
  // ranks only (rank 0 then receives first, and so does rank 1) must not change that the written
  // file completes.
  for (const std::string name : {"1f1b", "interleaved-1f1b", "zb-v", "dualpipe-v"}) {
    CAPTURE(name);
    const pt::runtime_plan built = pt::build_plan(pt::make_schedule(name, 4, 8));
    REQUIRE(built.ok());
    pt::lowered_program reversed = pt::copy_of(built.lowered());
    int reversed_groups = 0;
    for (std::size_t k = 0; k < reversed.ops.size(); ++k) {
      const bool even_rank = (std::upper_bound(reversed.begin.begin(), reversed.begin.end(), static_cast<int>(k)) -
                              reversed.begin.begin() - 1) %
                                 2 ==
                             0;
      if (reversed.ops[k].code != pt::op_code::group || !even_rank) continue;
      std::size_t e = k + 1;
      while (e < reversed.ops.size() &&
             (reversed.ops[e].code == pt::op_code::send || reversed.ops[e].code == pt::op_code::recv))
        ++e;
      std::reverse(reversed.ops.begin() + static_cast<long>(k) + 1, reversed.ops.begin() + static_cast<long>(e));
      reversed_groups += e - k > 2 ? 1 : 0;
    }
    CHECK(reversed_groups > 0);
    CHECK(pt::verify_lowered(reversed.view()).ok());
    CHECK(pt::describe(pt::verify_transfers(built.compute(), pt::file_of(built.compute(), reversed.view()).view())) ==
          "ok");
  }
}

TEST_CASE("notation: --ranks below the file's rows is out of range even for a row with no compute") {
  pt::read_options o;
  o.ranks = 2;
  const pt::program p =
      pt::parse_schedule("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n1SEND_B0,7RECV_F9,0SEND_F0\n", o);
  const pt::verdict v = pt::verify(p.view());
  CHECK(v.code == pt::errc::rank_out_of_range);
  CHECK(v.rank == 2);
}

TEST_CASE("notation: a marker naming a stage no action has is refused at its line and column") {
  // a compute-only file with markers: stages 0 and 1, and a REDUCE_GRAD of stage 7
  const pt::program p = pt::parse_schedule("0UNSHARD,0F0,0B0,0RESHARD\n1F0,1B0, 7REDUCE_GRAD\n");
  CHECK(p.source_error.code == pt::errc::parse_error);
  CHECK(p.source_error.line == 2);
  CHECK(p.source_error.column == 10);
  CHECK(pt::describe(p.source_error) ==
        "parse error at line 2, column 10: a marker (UNSHARD, RESHARD, REDUCE_GRAD, ...) names a stage no action of "
        "the file has");
  CHECK(!pt::build_plan(p).ok());
  // of several, the highest stage, where it first appears
  const pt::program two = pt::parse_schedule("0F0,0B0,5UNSHARD\n9RESHARD,1F0,1B0,9UNSHARD\n");
  CHECK(two.source_error.line == 2);
  CHECK(two.source_error.column == 1);
  // markers of the file's own stages are kept, as before
  const pt::program ok = pt::parse_schedule("0UNSHARD,0F0,0B0,0RESHARD\n1F0,1B0,1REDUCE_GRAD\n");
  CHECK(ok.source_error.ok());
  CHECK(pt::verify(ok.view()).ok());
}

TEST_CASE("notation: PyTorch's own UNSHARD, RESHARD and REDUCE_GRAD are read as collectives, placed as a step needs") {
  // torch's generated files (_add_unshard_reshard with its window of 3, _add_reduce_grad) pass our
  // checks, and their mesh step over two replicas proves
  for (const char* name : {"pytorch/interleaved_p2_m4_comms.csv", "pytorch/interleaved_p2_m4_comms_deferred.csv",
                           "pytorch/looped_bfs_p4_m8_comms_deferred.csv", "pytorch/dualpipev_p2_m4_comms.csv"}) {
    CAPTURE(name);
    const pt::schedule_file f = pt::read_schedule(read_data(name));
    REQUIRE(f.error.ok());
    REQUIRE(pt::has_collectives(f));
    pt::program prog = pt::to_program(f);
    prog.source_error = {};  // (the deferred files' transfers need a stream per peer: not this test's question)
    REQUIRE(pt::verify(prog.view()).ok());
    const pt::collective_program c = pt::collectives_of(f, prog.ranks);
    bool shard = false;
    int reductions = 0;
    for (const pt::collective& x : c.ops) {
      shard = shard || x.what == pt::collective_kind::unshard;
      reductions += x.what == pt::collective_kind::reduce_grad;
    }
    CHECK(reductions == prog.stages);
    const pt::dp_options o{.dp = 2, .shard = shard};
    CHECK_MESSAGE(pt::check_collectives(prog.view(), c, o).ok(),
                  pt::describe(pt::check_collectives(prog.view(), c, o)));
    const pt::runtime_plan built = pt::build_plan(prog);
    REQUIRE(built.ok());
    CHECK(pt::verify_mesh(pt::lower_mesh(built.compute(), built.lowered(), {prog.ranks, 2}, c, o)).ok());
  }
}

TEST_CASE("notation: a file's misplaced REDUCE_GRAD or missing UNSHARD is one sentence") {
  // rank 0's REDUCE_GRAD moved before its last backward
  const std::string early =
      "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0B3\n"
      "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3,1REDUCE_GRAD,1WAIT_REDUCE_GRAD\n";
  const pt::schedule_file f = pt::read_schedule(early);
  const pt::verdict v = pt::check_collectives(pt::to_program(f).view(), pt::collectives_of(f), {.dp = 2});
  CHECK(v.code == pt::errc::collective_misplaced);
  CHECK(pt::describe(v).find("a REDUCE_GRAD before the stage's last weight backward (B or W)") != std::string::npos);
  // a sharded file whose rank 1 computes stage 1 before gathering it
  const std::string ungathered = "0UNSHARD,0F0,0B0,0REDUCE_GRAD,0RESHARD\n1F0,1UNSHARD,1B0,1REDUCE_GRAD,1RESHARD\n";
  const pt::schedule_file g = pt::read_schedule(ungathered);
  const pt::program q = pt::to_program(g);
  const pt::verdict w = pt::check_collectives(q.view(), pt::collectives_of(g), {.dp = 2, .shard = true});
  CHECK(w.code == pt::errc::collective_misplaced);
  CHECK(w.rank == 1);
}

TEST_CASE("notation: a mesh step's collectives are written where they were placed, and read back the same") {
  for (const bool shard : {false, true}) {
    CAPTURE(shard);
    const pt::runtime_plan built = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
    const pt::dp_options o{.dp = 2, .shard = shard, .window = 2};
    const pt::collective_program c = pt::place_collectives(built.compute(), o);
    const std::string csv = pt::to_csv(built.compute(), built.lowered(), c);
    const pt::schedule_file f = pt::read_schedule(csv);
    REQUIRE(f.error.ok());
    const pt::collective_program back = pt::collectives_of(f, built.compute().ranks);
    CHECK(back.begin == c.begin);
    CHECK(back.ops == c.ops);
    CHECK(pt::check_collectives(pt::to_program(f).view(), back, o).ok());
    CHECK(pt::torch_load_note(f, pt::to_program(f).view(), pt::csv_format::compute_comms).empty());
    CHECK(pt::verify_transfers(pt::to_program(f).view(), f.view(), pt::p2p_streams::shared).ok());
  }
}

TEST_CASE("notation: OFFLOAD, RELOAD and RECOMPUTE are read after the action before them and written back") {
  const std::string text = "0F0,0OFFLOAD0,0F1,0F2,0RELOAD0,0B0,0RECOMPUTE1,0B1,0B2\n";
  const pt::schedule_file f = pt::read_schedule(text);
  REQUIRE(f.error.ok());
  CHECK(pt::has_memory_actions(f));
  const pt::program p = pt::to_program(f);
  REQUIRE(pt::verify(p.view()).ok());
  const pt::memory_program m = pt::memory_actions_of(f, p.view());
  REQUIRE(m.ops.size() == 3);
  CHECK(m.ops[0] == pt::offload(0, 0, 0, 2));  // completes by default before the second action after it
  CHECK(m.ops[1] == pt::reload(0, 0, 2));
  CHECK(m.ops[2] == pt::recompute(0, 1, 3));
  // 0F1 is recomputed: its forward keeps only the input, and 0B1 finds it rebuilt
  CHECK(pt::check_memory_actions(p.view(), m).ok());
  CHECK(pt::to_text(p.view(), m) == text);
  // torch's runtime has no such actions
  CHECK(pt::torch_load_note(f, p.view(), pt::csv_format::compute_comms).find("torch 2.15 has no memory actions") !=
        std::string::npos);
  // a RELOAD written before its OFFLOAD is named
  const pt::schedule_file bad = pt::read_schedule("0F0,0RELOAD0,0OFFLOAD0,0B0");
  const pt::program q = pt::to_program(bad);
  CHECK(pt::describe(pt::check_memory_actions(q.view(), pt::memory_actions_of(bad, q.view()))) ==
        "memory action misplaced at rank 0, stage 0, microbatch 0, action 0RELOAD0 (index 0): a RELOAD before its "
        "OFFLOAD");
}

using offloading = pt::from_text<"0F0,0OFFLOAD0,0F1,0F2,0RELOAD0,0B0,0B1,0B2">;
static_assert(offloading::memory().ops.size() == 2);

}  // namespace test_notation
}  // namespace
