# Precompiled headers: parsing the standard library, Asio and Catch2 is about
# a third of a translation unit's compile time here (docs/testing.md, "Build
# time"). GCC only by default: GCC falls back to the plain header when a
# precompiled one does not match a translation unit's flags (-Winvalid-pch
# says so), clang refuses it. -DCHORUS_PCH=OFF builds without them.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(chorus_pch_default ON)
else()
  set(chorus_pch_default OFF)
endif()
option(CHORUS_PCH "Precompile the standard library, Asio and Catch2 headers" ${chorus_pch_default})

# The standard headers most sources of the core and the transports include.
set(CHORUS_PCH_STD <algorithm> <array> <atomic> <chrono> <condition_variable> <cstdint>
    <cstring> <deque> <functional> <map> <memory> <mutex> <optional> <span> <sstream>
    <string> <string_view> <thread> <unordered_map> <vector>)
# The Asio headers the bootstrap and the TCP transport include.
set(CHORUS_PCH_ASIO <asio/connect.hpp> <asio/io_context.hpp> <asio/ip/tcp.hpp>
    <asio/post.hpp> <asio/read.hpp> <asio/steady_timer.hpp> <asio/write.hpp>)

# chorus_precompile(TARGET HEADER... [SKIP SOURCE...]): TARGET's sources (C++
# only) get HEADER... precompiled, except SOURCE...
function(chorus_precompile target)
  cmake_parse_arguments(P "" "" "SKIP" ${ARGN})
  if(CHORUS_PCH)
    target_precompile_headers(${target} PRIVATE ${P_UNPARSED_ARGUMENTS})
    set_source_files_properties(${P_SKIP} TARGET_DIRECTORY ${target} PROPERTIES
                                SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()
# SKIP: GCC 12 does not treat headers that come from a precompiled header as
# system headers when it warns after inlining: std::string's operator+ and
# append inlined into some of our functions then draw -Wstringop-overflow and
# -Warray-bounds (false positives, GCC bug 105329) that are silent with the
# plain headers. The files where that happens are compiled without a
# precompiled header; a build that shows such a warning names the next one.
