# Optional parts of the build (fabric plugins, the MPI and Slurm launch
# tests, the comparison benchmarks). With CHORUS_REQUIRE_ALL=ON (set by
# scripts/build.sh under CI) a part whose library or tool is missing is a
# configure error naming what to install; otherwise it is left out with a
# STATUS line that says so.
option(CHORUS_REQUIRE_ALL "Fail the configure step when any optional part cannot be built" OFF)

# chorus_optional_missing(<what is left out> <what to install>)
function(chorus_optional_missing what fix)
  if(CHORUS_REQUIRE_ALL)
    message(FATAL_ERROR "Chorus: ${what} cannot be built: ${fix} (CHORUS_REQUIRE_ALL=ON)")
  else()
    message(STATUS "Chorus: ${what} not built: ${fix}")
  endif()
endfunction()
