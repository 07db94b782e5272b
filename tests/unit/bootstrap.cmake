# Bootstrap side channel and its wire framing (core/bootstrap.*, core/frame.h).
add_executable(bootstrap_test core/bootstrap_test.cc core/bootstrap_join_test.cc
  core/bootstrap_failure_test.cc core/bootstrap_test_util.cc core/frame_test.cc)
target_link_libraries(bootstrap_test PRIVATE chorus_bootstrap chorus_catch_main)
target_compile_options(bootstrap_test PRIVATE -Wall -Wextra)
add_test(NAME unit.bootstrap COMMAND bootstrap_test)
set_tests_properties(unit.bootstrap PROPERTIES TIMEOUT 120 LABELS unit)
