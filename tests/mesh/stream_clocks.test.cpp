// mesh/stream_clocks.hpp on its own: per op of one rank, a vector clock over its streams. Program
// order on a stream orders; an event's latest record before a wait orders the waiter after it (and
// a later record of the same event does not reach back); an NCCL group's transfers share the
// group's clock; nothing else orders two streams.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_stream_clocks {

namespace pt = pipetype;
using pt::mesh_op;
using pt::mesh_op_code;

mesh_op op(mesh_op_code code, int stream, int wait_event = -1, int record_event = -1) {
  mesh_op o;
  o.code = code;
  o.stream = stream;
  o.wait_event = wait_event;
  o.record_event = record_event;
  return o;
}
mesh_op event_op(mesh_op_code code, int stream, int event) {
  mesh_op o = op(code, stream);
  o.event = event;
  return o;
}

// One rank's ops, two events.
pt::mesh_program one_rank(std::vector<mesh_op> ops) {
  pt::mesh_program mp;
  mp.shape = pt::mesh{1, 1};
  mp.begin = {0, static_cast<int>(ops.size())};
  mp.ops = std::move(ops);
  mp.events = {2};
  return mp;
}

}  // namespace test_stream_clocks
}  // namespace

using namespace test_stream_clocks;

TEST_CASE("stream clocks: program order and an event's record order, and nothing else, order two streams") {
  // 0: compute on stream 0, records e0; 1: compute on stream 1; 2: wait e0 on stream 1; 3: compute on stream 1
  const pt::mesh_program mp = one_rank({op(mesh_op_code::compute, 0, -1, 0), op(mesh_op_code::compute, 1),
                                        event_op(mesh_op_code::wait, 1, 0), op(mesh_op_code::compute, 1)});
  const auto ops = mp.rank_ops(0);
  const auto clock = pt::detail::rank_clocks(mp, 0);
  REQUIRE(clock.size() == 4);
  CHECK(pt::detail::happens_before(ops, clock, 0, 3));   // through the event
  CHECK(pt::detail::happens_before(ops, clock, 1, 3));   // program order on stream 1
  CHECK_FALSE(pt::detail::happens_before(ops, clock, 0, 1));  // before the wait: unordered
  CHECK_FALSE(pt::detail::happens_before(ops, clock, 1, 0));
  CHECK_FALSE(pt::detail::happens_before(ops, clock, 3, 0));
}

TEST_CASE("stream clocks: a wait sees the latest record issued before it, not a later one") {
  // stream 0: A records e0, B records e0 again; stream 1 waits e0 between them, then after B
  const pt::mesh_program mp =
      one_rank({op(mesh_op_code::compute, 0, -1, 0),  // 0: A
                event_op(mesh_op_code::wait, 1, 0),   // 1: waits for A
                op(mesh_op_code::compute, 1),         // 2
                op(mesh_op_code::compute, 0, -1, 0),  // 3: B, records e0 again
                op(mesh_op_code::compute, 1, 0),      // 4: its own wait on e0: now B's
                op(mesh_op_code::compute, 0)});       // 5: after B on stream 0
  const auto ops = mp.rank_ops(0);
  const auto clock = pt::detail::rank_clocks(mp, 0);
  CHECK(pt::detail::happens_before(ops, clock, 0, 2));
  CHECK_FALSE(pt::detail::happens_before(ops, clock, 3, 2));  // B was recorded after the wait
  CHECK(pt::detail::happens_before(ops, clock, 3, 4));
  CHECK_FALSE(pt::detail::happens_before(ops, clock, 5, 4));
}

TEST_CASE("stream clocks: the transfers of an NCCL group share the group's clock") {
  // stream 1: a group waiting for e0 (recorded by the compute before it), its send and recv, then
  // a compute; the compute on stream 0 after the record is unordered with all of them
  mesh_op group = op(mesh_op_code::group, 1, 0, 1);
  const pt::mesh_program mp = one_rank({op(mesh_op_code::compute, 0, -1, 0), group, op(mesh_op_code::send, 1),
                                        op(mesh_op_code::recv, 1), op(mesh_op_code::compute, 1),
                                        op(mesh_op_code::compute, 0, 1)});
  const auto ops = mp.rank_ops(0);
  const auto clock = pt::detail::rank_clocks(mp, 0);
  CHECK(clock[2] == clock[1]);
  CHECK(clock[3] == clock[1]);
  CHECK(pt::detail::happens_before(ops, clock, 0, 2));  // the group's wait covers its transfers
  CHECK(pt::detail::happens_before(ops, clock, 3, 5));  // and its record, what waits for it
  CHECK_FALSE(pt::detail::happens_before(ops, clock, 4, 5));  // the compute after the group: not covered
}
