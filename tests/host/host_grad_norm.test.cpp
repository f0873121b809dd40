// GRAD_NORM on the host mesh executor (dp_options::grad_norm): mesh_executor::grad_norm() after a
// step is the norm of the reduced gradients over the whole mesh, every stage's once and a tied
// parameter's once — bitwise the sum in the order the collective promises (ranks in order, each
// rank's stages in order, what the rank answers for: its own shard when sharded, replica 0's
// whole gradients otherwise), and within rounding of the plain norm of the assembled gradient.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include "mesh_stages.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <deque>
#include <stdexcept>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_grad_norm {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

using mesh_stages::width;
using lin = mesh_stages::lin<false>;
using model = pt::chain<lin, lin, lin, mesh_stages::mse>;
constexpr std::size_t n = 2 * width;  // a lin stage's weight-gradient elements; its first `width` are tied

struct run : mesh_stages::replicas_with_batch<model> {
  using replicas_with_batch::replicas_with_batch;
  const float* acc(int d, int s) {
    model& m = models[static_cast<std::size_t>(d)];
    return s == 0 ? m.stage<0>().acc : s == 1 ? m.stage<1>().acc : m.stage<2>().acc;
  }
};

double sumsq(const float* a, std::size_t b, std::size_t e) {
  double s = 0;
  for (std::size_t i = b; i < e; ++i) s += static_cast<double>(a[i]) * static_cast<double>(a[i]);
  return s;
}

TEST_CASE("host grad norm: the reduced gradients' norm over the mesh, in the collective's order, tied once") {
  const int m = 4;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));  // rank r holds stage r
  for (const int D : {1, 2, 3})
    for (const bool shard : {false, true})
      for (const bool tie : {false, true}) {
        CAPTURE(D);
        CAPTURE(shard);
        CAPTURE(tie);
        run r(D, m);
        pt::dp_options o{.dp = D, .shard = shard, .grad_norm = true};
        if (tie) o.ties = {{0, 2}};  // w of stages 0 and 2 (tied_gradients: the first `width` elements)
        ph::mesh_executor ex{plan, pt::mesh{4, D}, o, r.ptrs, {.exec = {.deadline = 20s}}};
        ex.step(r.b);
        // the promised order: global ranks (r·D + d) in order; rank (r, d) adds stage r's part
        double total = 0;
        for (int s = 0; s < 3; ++s)
          for (int d = 0; d < D; ++d) {
            const pt::shard_range own = shard && D > 1 ? pt::shard_of(n, D, d) : pt::shard_range{0, d == 0 ? n : 0};
            const std::size_t from = tie && s == 2 ? width : 0;  // stage 2's tied w: counted on stage 0
            if (std::max(own.begin, from) < own.end) total += sumsq(r.acc(d, s), std::max(own.begin, from), own.end);
          }
        CHECK(ex.grad_norm() == std::sqrt(total));
        // the assembled gradient (each element from the replica that owns it), its plain norm
        double plain = 0;
        for (int s = 0; s < 3; ++s)
          for (std::size_t i = tie && s == 2 ? width : 0; i < n; ++i) {
            const int owner =
                shard && D > 1
                    ? static_cast<int>(i / ((n + static_cast<std::size_t>(D) - 1) / static_cast<std::size_t>(D)))
                    : 0;
            const double v = r.acc(owner, s)[i];
            plain += v * v;
          }
        CHECK(ex.grad_norm() == doctest::Approx(std::sqrt(plain)).epsilon(1e-12));
        CHECK(ex.grad_norm() > 0);
      }
}

TEST_CASE("host grad norm: asked of a step without GRAD_NORM, a logic error") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 2));
  run r(2, 2);
  ph::mesh_executor ex{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2}, r.ptrs};
  ex.step(r.b);
  CHECK_THROWS_WITH_AS(ex.grad_norm(), doctest::Contains("the step has no GRAD_NORM"), std::logic_error);
}

TEST_CASE("host grad norm: a rank that throws before its GRAD_NORM ends the step on every rank, and the next runs") {
  const int m = 4, D = 2;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  const pt::dp_options o{.dp = D, .grad_norm = true};
  run r(D, m);
  ph::mesh_executor ex{plan, pt::mesh{4, D}, o, r.ptrs, {.exec = {.deadline = 20s}}};
  mesh_stages::throw_at = m - 1;  // stage 1's forward of the last microbatch, on both replicas
  try {
    ex.step(r.b);
    FAIL("the step should have failed");
  } catch (const ph::step_error& e) {
    CHECK(e.cause() == pt::failure_cause::stage_threw);
    bool aborted = false;  // the ranks waiting in GRAD_NORM (or before it) were woken, not left hanging
    for (const pt::failure& f : e.failures()) aborted = aborted || f.cause == pt::failure_cause::aborted;
    CHECK(aborted);
  }
  mesh_stages::throw_at = -1;
  for (model& md : r.models) {
    for (float& v : md.stage<0>().acc) v = 0;
    for (float& v : md.stage<1>().acc) v = 0;
    for (float& v : md.stage<2>().acc) v = 0;
  }
  ex.step(r.b);
  CHECK(ex.failures().empty());
  run fresh(D, m);
  ph::mesh_executor ex2{plan, pt::mesh{4, D}, o, fresh.ptrs, {.exec = {.deadline = 20s}}};
  ex2.step(fresh.b);
  CHECK(ex.grad_norm() == ex2.grad_norm());
}

}  // namespace test_host_grad_norm
}  // namespace
