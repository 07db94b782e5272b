# Runs a command and passes only when it exits with the expected status (0
# unless STATUS is set) AND its output (stdout and stderr together) matches a
# regular expression. ctest's PASS_REGULAR_EXPRESSION alone ignores the exit
# status, so a tool that prints the right text and then fails would pass.
#
#   cmake -DEXPECT=<regex> [-DEXPECT_ALSO=<regex>] [-DSTATUS=<n>] -P expect_output.cmake
#         -- <command> [args...]
#
# EXPECT_ALSO must match too, anywhere: for text that goes to the other
# stream, whose order relative to the first is not fixed.
cmake_minimum_required(VERSION 3.20)

set(command)
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "usage: cmake -DEXPECT=<regex> [-DSTATUS=<n>] -P expect_output.cmake -- <command> [args...]")
endif()
if(NOT DEFINED STATUS)
  set(STATUS 0)
endif()
if(NOT DEFINED EXPECT)
  message(FATAL_ERROR "expect_output.cmake: set EXPECT to the regular expression to match")
endif()

execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE output
                ERROR_VARIABLE output)
message("${output}")
if(NOT status STREQUAL "${STATUS}")
  message(FATAL_ERROR "exit status ${status} (expected ${STATUS}) from: ${command}")
endif()
foreach(pattern EXPECT EXPECT_ALSO)
  if(DEFINED ${pattern} AND NOT output MATCHES "${${pattern}}")
    message(FATAL_ERROR "the output does not match: ${${pattern}}")
  endif()
endforeach()
