// Owner of the precompiled catch2/catch.hpp the test executables share
// (tests/CMakeLists.txt, chorus_catch_pch); the header comes in through it.
