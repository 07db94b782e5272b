add_executable(core_test core/auto_transport_test.cc core/call_signature_test.cc core/config_test.cc
               core/plugin_loader_test.cc core/limits_test.cc core/config_keys_test.cc
               core/notice_relay_test.cc core/choice_memo_test.cc core/group_plan_test.cc)
target_compile_definitions(core_test PRIVATE CHORUS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_link_libraries(core_test PRIVATE chorus_core chorus_catch_main)
# The auto transport's cases load the shm and tcp plugins.
foreach(plugin chorus_transport_tcp chorus_transport_shm)
  if(TARGET ${plugin})
    add_dependencies(core_test ${plugin})
  endif()
endforeach()
add_test(NAME unit.core COMMAND core_test "~[config_keys]")
set_tests_properties(unit.core PROPERTIES TIMEOUT 60)
# The key registry against docs/configuration.md and the parser, and the
# suggestions in configuration errors.
add_test(NAME unit.config_keys COMMAND core_test "[config_keys]")
set_tests_properties(unit.config_keys PROPERTIES TIMEOUT 60)

add_executable(ring_schedule_test ring/ring_schedule_test.cc ring/ring_settings_test.cc)
target_link_libraries(ring_schedule_test PRIVATE chorus_catch_main)
target_include_directories(ring_schedule_test PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
add_test(NAME unit.ring_schedule COMMAND ring_schedule_test)

# The ring's v2 tasks on an in-process fake transport (tests/unit/ring/
# ring_task_test.cc): the plugin's own sources, no core, no dlopen.
add_executable(ring_task_test ring/ring_task_test.cc
  ${PROJECT_SOURCE_DIR}/algorithms/ring/ring_task.cc
  ${PROJECT_SOURCE_DIR}/algorithms/ring/ring_collectives.cc
  ${PROJECT_SOURCE_DIR}/algorithms/ring/ring_exchange.cc
  ${PROJECT_SOURCE_DIR}/algorithms/ring/ring_executor.cc)
target_link_libraries(ring_task_test PRIVATE chorus_catch_main Threads::Threads)
target_include_directories(ring_task_test PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(ring_task_test PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)
add_test(NAME unit.ring_task COMMAND ring_task_test)
set_tests_properties(unit.ring_task PROPERTIES TIMEOUT 120 LABELS unit)
