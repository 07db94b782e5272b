#include "tools/chorusrun/line_prefixer.h"

#include <catch2/catch.hpp>

#include <string>

namespace chorus::run {
namespace {

TEST_CASE("LinePrefixer emits only complete prefixed lines", "[unit]") {
  LinePrefixer lines("[3] ");
  std::string out;
  lines.feed("one\ntw", out);
  CHECK(out == "[3] one\n");
  CHECK(lines.has_partial_line());
  lines.feed("o\nthree\n", out);
  CHECK(out == "[3] one\n[3] two\n[3] three\n");
  CHECK_FALSE(lines.has_partial_line());
  lines.finish(out);
  CHECK(out == "[3] one\n[3] two\n[3] three\n");
}

TEST_CASE("LinePrefixer reassembles a line fed byte by byte", "[unit]") {
  LinePrefixer lines("[0] ");
  std::string out;
  for (const char c : std::string("abc\n\nd")) {
    lines.feed(std::string_view(&c, 1), out);
  }
  CHECK(out == "[0] abc\n[0] \n");
  lines.finish(out);
  CHECK(out == "[0] abc\n[0] \n[0] d\n");
}

TEST_CASE("LinePrefixer with an empty prefix passes lines through", "[unit]") {
  LinePrefixer lines("");
  std::string out;
  lines.feed("x\ny", out);
  lines.finish(out);
  CHECK(out == "x\ny\n");
}

TEST_CASE("LinePrefixer cuts a line that exceeds its bound", "[unit]") {
  LinePrefixer lines("> ", 4);
  std::string out;
  lines.feed("abcdefghij", out);
  CHECK(out == "> abcd\n> efgh\n");
  lines.feed("\n", out);
  CHECK(out == "> abcd\n> efgh\n> ij\n");
}

}  // namespace
}  // namespace chorus::run
