// host/collective.hpp: NCCL's collectives between threads — the fixed arithmetic of all-reduce,
// reduce-scatter (uneven shards) and all-gather, a local sum and a release; a member that never
// arrives is named at the deadline; an abort wakes every waiter; members that disagree fail together.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_collective {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

ph::collective_call call_of(ph::collectives& f, pt::mesh_op_code what, int member, int members,
                            std::vector<float*> parts, std::size_t elems) {
  ph::collective_call c;
  c.what = what;
  c.comm = what == pt::mesh_op_code::local_sum || what == pt::mesh_op_code::release ? -1 : 0;
  c.member = member;
  c.members = members;
  c.rank = 10 + member;
  c.stage = 1;
  for (float* p : parts) c.parts.push_back(reinterpret_cast<std::byte*>(p));
  c.elems = elems;
  c.size = sizeof(float);
  c.reduce = &pt::detail::reduce_parts<float>;
  c.poison = &pt::detail::poison_range<float>;
  c.fabric = &f;
  c.label = "REDUCE_GRAD(1) on communicator 0";
  return c;
}

// Runs each member's call on a thread of its own; returns what each threw ("" when none).
std::vector<std::string> meet(ph::collectives& f, std::vector<ph::collective_call>& calls) {
  std::vector<std::string> errors(calls.size());
  std::vector<std::thread> ts;
  for (std::size_t k = 0; k < calls.size(); ++k)
    ts.emplace_back([&, k] {
      try {
        f.run(calls[k]);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
  for (std::thread& t : ts) t.join();
  return errors;
}

TEST_CASE("collectives: all-reduce sums in member order, every array gets the sum") {
  ph::collectives f({{10, 11, 12}}, 5s);
  std::vector<float> a{1e8f, 1, 2}, b{1, 2, 3}, c{-1e8f, 3, 4}, c2{0.5f, 0.5f, 0.5f};
  std::vector<ph::collective_call> calls{call_of(f, pt::mesh_op_code::all_reduce, 0, 3, {a.data()}, 3),
                                         call_of(f, pt::mesh_op_code::all_reduce, 1, 3, {b.data()}, 3),
                                         call_of(f, pt::mesh_op_code::all_reduce, 2, 3, {c.data(), c2.data()}, 3)};
  for (const std::string& e : meet(f, calls)) CHECK(e.empty());
  // element 0: ((1e8 + 1) + −1e8) + 0.5 = 0.5 in float (1e8 + 1 rounds to 1e8), not 1.5
  const float want0 = ((1e8f + 1.0f) + -1e8f) + 0.5f;
  for (const std::vector<float>* v : {&a, &b, &c, &c2}) {
    CHECK((*v)[0] == want0);
    CHECK((*v)[1] == 6.5f);
    CHECK((*v)[2] == 9.5f);
  }
}

TEST_CASE("collectives: reduce-scatter keeps each member's shard of the sums, all-gather spreads the shards") {
  ph::collectives f({{10, 11, 12}}, 5s);
  const std::size_t n = 7;  // shards of 3: [0,3) [3,6) [6,7)
  std::vector<std::vector<float>> x(3, std::vector<float>(n));
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t i = 0; i < n; ++i) x[k][i] = static_cast<float>(10 * k + i);
  std::vector<ph::collective_call> rs;
  for (int k = 0; k < 3; ++k)
    rs.push_back(call_of(f, pt::mesh_op_code::reduce_scatter, k, 3, {x[static_cast<std::size_t>(k)].data()}, n));
  for (const std::string& e : meet(f, rs)) CHECK(e.empty());
  for (int k = 0; k < 3; ++k) {
    const pt::shard_range own = pt::shard_of(n, 3, k);
    for (std::size_t i = 0; i < n; ++i)
      CHECK(x[static_cast<std::size_t>(k)][i] == (i >= own.begin && i < own.end
                                                      ? static_cast<float>(30 + 3 * i)
                                                      : static_cast<float>(10 * static_cast<std::size_t>(k) + i)));
  }
  std::vector<ph::collective_call> ag;
  for (int k = 0; k < 3; ++k)
    ag.push_back(call_of(f, pt::mesh_op_code::all_gather, k, 3, {x[static_cast<std::size_t>(k)].data()}, n));
  for (const std::string& e : meet(f, ag)) CHECK(e.empty());
  for (std::size_t k = 0; k < 3; ++k)  // the gather overwrites every part with its owner's sums
    for (std::size_t i = 0; i < n; ++i) CHECK(x[k][i] == static_cast<float>(30 + 3 * i));
  CHECK(pt::shard_of(7, 3, 2) == pt::shard_range{6, 7});
  CHECK(pt::shard_of(2, 3, 2) == pt::shard_range{2, 2});  // more replicas than elements: empty shards
}

TEST_CASE("collectives: a local sum and a release need no peer") {
  ph::collectives f({}, 5s);
  std::vector<float> a{1, 2, 3, 4, 5}, b{10, 20, 30, 40, 50};
  ph::collective_call s = call_of(f, pt::mesh_op_code::local_sum, 0, 1, {a.data(), b.data()}, 5);
  f.run(s);
  CHECK(a == std::vector<float>{11, 22, 33, 44, 55});
  CHECK(b == a);
  ph::collective_call r = call_of(f, pt::mesh_op_code::release, 1, 2, {a.data()}, 5);  // owns [3, 5)
  f.run(r);
  CHECK(std::isnan(a[0]));
  CHECK(std::isnan(a[2]));
  CHECK(a[3] == 44);
  CHECK(a[4] == 55);
}

TEST_CASE("collectives: a member that never arrives is named, an abort wakes the waiters, a mismatch fails all") {
  {
    ph::collectives f({{10, 11, 12}}, 50ms);
    std::vector<float> a(2), b(2);
    std::vector<ph::collective_call> calls{call_of(f, pt::mesh_op_code::all_reduce, 0, 3, {a.data()}, 2),
                                           call_of(f, pt::mesh_op_code::all_reduce, 2, 3, {b.data()}, 2)};
    const std::vector<std::string> e = meet(f, calls);
    CHECK(e[0] == "pipetype::host: rank 10: REDUCE_GRAD(1) on communicator 0 waited 50 ms for rank 11 to reach it");
    CHECK(e[1] == "pipetype::host: rank 12: REDUCE_GRAD(1) on communicator 0 waited 50 ms for rank 11 to reach it");
    f.reset();  // the next round starts clean
    std::vector<float> c(2, 1.0f);
    std::vector<ph::collective_call> all{call_of(f, pt::mesh_op_code::all_reduce, 0, 3, {a.data()}, 2),
                                         call_of(f, pt::mesh_op_code::all_reduce, 1, 3, {c.data()}, 2),
                                         call_of(f, pt::mesh_op_code::all_reduce, 2, 3, {b.data()}, 2)};
    for (const std::string& x : meet(f, all)) CHECK(x.empty());
    CHECK(a[0] == 1.0f);
  }
  {
    ph::collectives f({{10, 11}}, 20s);
    std::vector<float> a(2);
    ph::collective_call c = call_of(f, pt::mesh_op_code::all_reduce, 0, 2, {a.data()}, 2);
    std::string error;
    std::thread t([&] {
      try {
        f.run(c);
      } catch (const ph::aborted_error& e) {
        error = e.what();
      }
    });
    std::this_thread::sleep_for(20ms);
    f.abort("rank 11 failed");
    t.join();
    CHECK(error == "rank 11 failed");
  }
  {
    ph::collectives f({{10, 11}}, 5s);
    std::vector<float> a(2), b(3);
    std::vector<ph::collective_call> calls{call_of(f, pt::mesh_op_code::all_reduce, 0, 2, {a.data()}, 2),
                                           call_of(f, pt::mesh_op_code::all_reduce, 1, 2, {b.data()}, 3)};
    const std::vector<std::string> e = meet(f, calls);
    const std::string want =
        "pipetype::host: ranks 10 and 11 issue different collectives at one position of a communicator: "
        "REDUCE_GRAD(1) on communicator 0 (2 elements) and REDUCE_GRAD(1) on communicator 0 (3)";
    CHECK(e[0] == want);
    CHECK(e[1] == want);
  }
}

}  // namespace test_collective
}  // namespace
