# The algorithm SDK's header-only pieces (include/chorus/algorithm_sdk.hpp),
# built as C++17: the SDK promises that much to plugin authors.
add_executable(algorithm_sdk_test sdk/algorithm_sdk_test.cc sdk/task_pool_test.cc)
# chorus_catch_main17, not chorus_catch_main: that one would carry C++20 in with it.
target_link_libraries(algorithm_sdk_test PRIVATE chorus_catch_main17 Threads::Threads)
target_include_directories(algorithm_sdk_test PRIVATE ${PROJECT_SOURCE_DIR}/include)
set_target_properties(algorithm_sdk_test PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
target_compile_options(algorithm_sdk_test PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)
add_test(NAME unit.algorithm_sdk COMMAND algorithm_sdk_test)
set_tests_properties(unit.algorithm_sdk PROPERTIES TIMEOUT 60 LABELS unit)
