// bind/report.hpp: every executor reports failures and op times in the same vocabulary.
#include <pipetype/bind/report.hpp>
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <type_traits>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_report {

namespace pt = pipetype;

// the host executor's names are the shared ones, and every executor's failures() lists them
static_assert(std::is_same_v<pt::host::failure, pt::failure>);
static_assert(std::is_same_v<pt::host::failure_cause, pt::failure_cause>);
static_assert(std::is_same_v<pt::host::op_time, pt::op_time>);
static_assert(std::is_same_v<decltype(std::declval<pt::cuda::executor<pt::cuda::record_driver>&>().failures()),
                             const std::vector<pt::failure>&>);
static_assert(std::is_same_v<decltype(std::declval<pt::cuda::loopback_pipeline<pt::cuda::record_driver>&>().failures()),
                             const std::vector<pt::failure>&>);

TEST_CASE("report: a failure names no place until it is given one") {
  const pt::failure f;
  CHECK(f.rank == -1);
  CHECK(f.op == -1);
  CHECK(f.action.empty());
  CHECK(f.cause == pt::failure_cause::aborted);
  const pt::op_time t;
  CHECK(t.start == 0);
  CHECK(t.end == 0);
}

}  // namespace test_report
}  // namespace
