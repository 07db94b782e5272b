# Mesh schedules, settings and scratch cache (algorithms/mesh/mesh_schedule.h,
# mesh_settings.h, mesh_scratch.h), without a transport.
add_executable(mesh_schedule_test mesh/mesh_schedule_test.cc mesh/mesh_settings_test.cc
  mesh/mesh_scratch_test.cc)
target_link_libraries(mesh_schedule_test PRIVATE chorus_catch_main)
target_include_directories(mesh_schedule_test PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(mesh_schedule_test PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)
add_test(NAME unit.mesh_schedule COMMAND mesh_schedule_test)
set_tests_properties(unit.mesh_schedule PROPERTIES TIMEOUT 60 LABELS unit)
