// guarded(), copy_caps() and copy_text(): the C-boundary helpers.
#include <catch2/catch.hpp>

#include <chorus/provider/plugin.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

using namespace chorus::provider;

TEST_CASE("guarded turns exceptions into statuses with the op's name", "[provider]") {
  CHECK(guarded("op", [] { return 5; }) == 5);
  CHECK(guarded("connect", []() -> int { throw Error(CHORUS_ERR_TIMEOUT, "took too long"); }) ==
        CHORUS_ERR_TIMEOUT);
  CHECK(std::string(last_error_text()) == "connect: took too long");
  CHECK(guarded("open", []() -> int { throw std::bad_alloc(); }) == CHORUS_ERR_SYSTEM);
  CHECK(std::string(last_error_text()) == "open: out of memory");
  CHECK(guarded("poll", []() -> int { throw std::logic_error("bug"); }) == CHORUS_ERR_INTERNAL);
  CHECK(std::string(last_error_text()) == "poll: bug");
  CHECK(null_argument("wait") == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(last_error_text()) == "wait: NULL argument");
}

TEST_CASE("copy_caps honours the caller's struct_size", "[provider]") {
  chorus_tp_caps_t caps{};
  caps.struct_size = sizeof caps;
  caps.max_message_size = 12345;

  chorus_tp_caps_t full{};
  full.struct_size = 0;  // minor 0 callers: the whole struct
  REQUIRE(copy_caps(caps, &full) == CHORUS_OK);
  CHECK(full.struct_size == sizeof caps);
  CHECK(full.max_message_size == 12345);

  chorus_tp_caps_t partial{};
  partial.struct_size = sizeof partial.struct_size;  // room for struct_size only
  partial.max_message_size = 1;
  REQUIRE(copy_caps(caps, &partial) == CHORUS_OK);
  CHECK(partial.struct_size == sizeof partial.struct_size);
  CHECK(partial.max_message_size == 1);  // not written

  chorus_tp_caps_t tiny{};
  tiny.struct_size = 1;
  CHECK(copy_caps(caps, &tiny) == CHORUS_ERR_INVALID_ARGUMENT);
}

TEST_CASE("copy_text cuts and terminates", "[provider]") {
  char buf[4];
  copy_text("abcdef", buf, sizeof buf);
  CHECK(std::string(buf) == "abc");
  copy_text("", buf, sizeof buf);
  CHECK(buf[0] == '\0');
  char one[1] = {'x'};
  copy_text("abc", one, 1);
  CHECK(one[0] == '\0');
}
