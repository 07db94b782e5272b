# The core as a static library of position-independent objects: linked into
# libchorus.so for hosts and directly into unit tests and tools that need
# internals (chorus-info).
add_library(chorus_core STATIC
  algorithm_env.cc
  algorithm_tasks.cc
  api.cc
  api_calls.cc
  api_group.cc
  auto_address.cc
  auto_context.cc
  auto_endpoint.cc
  auto_transport.cc
  auto_wait.cc
  call_signature.cc
  communicator.cc
  communicator_checks.cc
  communicator_counters.cc
  communicator_dispatch.cc
  communicator_select.cc
  communicator_split.cc
  communicator_lanes.cc
  lane_driver.cc
  communicator_wireup.cc
  data_connect.cc
  notice_connect.cc
  config.cc
  config_entry.cc
  config_keys.cc
  elf_check.cc
  job_identity.cc
  log.cc
  log_limiter.cc
  peer_notices.cc
  plugin_loader.cc
  proxied_ops.cc
  request_queue.cc
  p2p_engine.cc
  p2p_engine_connect.cc
  p2p_engine_peers.cc
  p2p_stream.cc
  user_memory.cc
  signature_exchange.cc
  suggest.cc
  transport_probe.cc)
target_compile_features(chorus_core PUBLIC cxx_std_20)
target_include_directories(chorus_core PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR})
target_include_directories(chorus_core SYSTEM PRIVATE ${CHORUS_XXHASH_INCLUDE_DIR})
target_compile_definitions(chorus_core PRIVATE CHORUS_INSTALL_LIBDIR="${CMAKE_INSTALL_LIBDIR}")
target_link_libraries(chorus_core PUBLIC chorus_reduce chorus_bootstrap PkgConfig::TOMLPP
                      ${CMAKE_DL_LIBS} Threads::Threads)
set_target_properties(chorus_core PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
chorus_precompile(chorus_core ${CHORUS_PCH_STD} SKIP api.cc api_calls.cc p2p_stream.cc plugin_loader.cc
                  proxied_ops.cc)

# libchorus.so: exports only the chorus_* C API.
add_library(chorus SHARED $<TARGET_OBJECTS:chorus_core>)
add_library(Chorus::chorus ALIAS chorus)
target_include_directories(chorus PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(chorus PRIVATE chorus_reduce chorus_bootstrap PkgConfig::TOMLPP
                      ${CMAKE_DL_LIBS} Threads::Threads)
target_link_options(chorus PRIVATE "LINKER:--no-undefined")
set_target_properties(chorus PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
install(TARGETS chorus EXPORT ChorusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
