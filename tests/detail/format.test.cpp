#include <pipetype/detail/format.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_format {

namespace pd = pipetype::detail;

TEST_CASE("format: round axis steps") {
  CHECK(pd::nice_at_least(0.7) == doctest::Approx(1));
  CHECK(pd::nice_at_least(1.3) == doctest::Approx(2));
  CHECK(pd::nice_at_least(3) == doctest::Approx(5));
  CHECK(pd::nice_at_least(5.1) == doctest::Approx(10));
  CHECK(pd::nice_at_least(0.012) == doctest::Approx(0.02));
}

TEST_CASE("format: decimals without trailing zeros") {
  CHECK(pd::decimal(2) == "2");
  CHECK(pd::decimal(0.25) == "0.25");
  CHECK(pd::decimal(-1.5) == "-1.5");
  CHECK(pd::decimal(1.23456) == "1.235");
  CHECK(pd::decimal(1.23456, 1) == "1.2");
  CHECK(pd::decimal(-0.0001) == "0");
  CHECK(pd::decimal(100) == "100");
}

TEST_CASE("format: XML and JSON escaping") {
  CHECK(pd::xml_escape("a<b & \"c\">") == "a&lt;b &amp; &quot;c&quot;&gt;");
  CHECK(pd::json_quote("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"");
}

}  // namespace test_format
}  // namespace
