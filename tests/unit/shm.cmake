# Pieces of the shared-memory transport (transports/shm) that stand alone:
# compiled into the test, since the plugin exports nothing else.
if(TARGET chorus_transport_shm)
  add_executable(shm_unit_test
    shm/placement_test.cc
    ${PROJECT_SOURCE_DIR}/transports/shm/shm_placement.cc)
  target_include_directories(shm_unit_test PRIVATE ${PROJECT_SOURCE_DIR}/transports/shm)
  target_link_libraries(shm_unit_test PRIVATE chorus_catch_main)
  target_compile_options(shm_unit_test PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)
  add_test(NAME unit.shm COMMAND shm_unit_test)
  set_tests_properties(unit.shm PROPERTIES TIMEOUT 60 LABELS unit)
endif()
