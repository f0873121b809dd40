// doctest's main, with one rule more: a run that selects no test case fails. CTest runs each
// case by name (doctest_discover_tests); a name CMake cannot carry (a ';' splits it in two) would
// otherwise select nothing and pass without testing anything.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

int cases_run = 0;

struct count_cases : doctest::IReporter {
  explicit count_cases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++cases_run; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("count_cases", 1, count_cases);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (failed != 0 || context.shouldExit()) return failed;
  if (cases_run == 0) {
    std::fprintf(stderr, "no test case matched the filters: a test that runs nothing fails\n");
    return 1;
  }
  return 0;
}
