# The C++ wrapper's element types: chorus::half, chorus::bfloat16 and the
# dtype trait (compile-time checks are part of the build), checked against
# _Float16, a nearest-value search and the JACCL layer's conversions.
add_executable(cxx_float16_test cxx/float16_test.cc)
target_link_libraries(cxx_float16_test PRIVATE chorus chorus_catch_main)
target_include_directories(cxx_float16_test PRIVATE ${PROJECT_SOURCE_DIR}/compat/jaccl/include)
target_compile_features(cxx_float16_test PRIVATE cxx_std_20)
add_test(NAME unit.cxx_float16 COMMAND cxx_float16_test)
set_tests_properties(unit.cxx_float16 PROPERTIES TIMEOUT 60)
