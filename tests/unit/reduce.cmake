# Reduction kernels (core/reduce.cc): every dtype x op against a scalar reference.
add_executable(reduce_test core/reduce_test.cc core/reduce_float_test.cc core/reduce_isa_test.cc
  core/reduce_reference.cc)
target_link_libraries(reduce_test PRIVATE chorus_reduce chorus_catch_main)
target_compile_options(reduce_test PRIVATE "$<$<CXX_COMPILER_ID:GNU,Clang>:-Wall;-Wextra>")
add_test(NAME unit.reduce COMMAND reduce_test)
