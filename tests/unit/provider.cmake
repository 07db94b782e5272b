# The provider toolkit (provider/, include/chorus/provider/), without a transport.
add_executable(provider_test
  provider/completion_queue_test.cc
  provider/context_base_test.cc
  provider/little_endian_test.cc
  provider/plugin_helpers_test.cc
  provider/receive_buffer_check_test.cc
  provider/settings_test.cc
  provider/wire_fields_test.cc
  provider/wr_ring_test.cc)
target_link_libraries(provider_test PRIVATE chorus_catch_main chorus_provider)
target_compile_options(provider_test PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)
add_test(NAME unit.provider COMMAND provider_test)
set_tests_properties(unit.provider PROPERTIES TIMEOUT 60 LABELS unit)
