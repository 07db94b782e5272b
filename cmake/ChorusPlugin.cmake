# chorus_add_plugin(<target> KIND transport|algorithm NAME <name> SOURCES ... [LIBRARIES ...])
#
# Every plugin is built the same way: a MODULE library named
# libchorus-<kind>-<name>.so, hidden visibility, a version script that exports
# only chorus_<kind>_plugin_v1, linked with --no-undefined, written into the
# build tree's plugin folder and installed into <libdir>/chorus.
function(chorus_add_plugin target)
  cmake_parse_arguments(P "NO_INSTALL" "KIND;NAME" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_KIND MATCHES "^(transport|algorithm)$")
    message(FATAL_ERROR "chorus_add_plugin(${target}): KIND must be transport or algorithm")
  endif()
  add_library(${target} MODULE ${P_SOURCES})
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${target} PRIVATE ${P_LIBRARIES})
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}.map")
  file(WRITE "${script}" "{\n  global: chorus_${P_KIND}_plugin_v1;\n  local: *;\n};\n")
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "chorus-${P_KIND}-${P_NAME}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${CHORUS_PLUGIN_OUTPUT_DIR}"
    LINK_DEPENDS "${script}")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${script}" "LINKER:--no-undefined")
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}/chorus")
  endif()
endfunction()
