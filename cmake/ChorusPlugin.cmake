# chorus_add_plugin(<target> KIND transport|algorithm NAME <name> SOURCES ...
#                   [ABI <major>] [LIBRARIES ...] [NO_INSTALL])
#
# Every plugin is built the same way: a MODULE library named
# libchorus-<kind>-<name>.so, hidden visibility, a version script that exports
# only chorus_<kind>_plugin_v<ABI> (ABI 1 unless given; algorithm plugins may
# be 2), linked with --no-undefined, written into the
# build tree's plugin folder and installed into <libdir>/chorus.
#
# Works in Chorus's own tree and, installed with the CMake package, in a third
# party's project (then the plugin links Chorus::plugin_sdk for the headers and
# lands in the caller's build folder unless CHORUS_PLUGIN_OUTPUT_DIR is set).
if(NOT CHORUS_SDK_TARGET)
  set(CHORUS_SDK_TARGET chorus_plugin_sdk)
endif()
function(chorus_add_plugin target)
  cmake_parse_arguments(P "NO_INSTALL" "KIND;NAME;ABI" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_ABI)
    set(P_ABI 1)
  endif()
  if(NOT P_KIND MATCHES "^(transport|algorithm)$")
    message(FATAL_ERROR "chorus_add_plugin(${target}): KIND must be transport or algorithm")
  endif()
  add_library(${target} MODULE ${P_SOURCES})
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_link_libraries(${target} PRIVATE ${CHORUS_SDK_TARGET} ${P_LIBRARIES})
  set(out_dir "${CHORUS_PLUGIN_OUTPUT_DIR}")
  if(NOT out_dir)
    set(out_dir "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}.map")
  file(WRITE "${script}" "{\n  global: chorus_${P_KIND}_plugin_v${P_ABI};\n  local: *;\n};\n")
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "chorus-${P_KIND}-${P_NAME}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${out_dir}"
    LINK_DEPENDS "${script}")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${script}" "LINKER:--no-undefined")
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}/chorus")
  endif()
endfunction()
