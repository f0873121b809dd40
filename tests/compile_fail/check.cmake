# Compiles SRC with CXX (-std=c++20 -fsyntax-only, from a precompiled header when PCH is given).
# MODE=pass: must succeed. MODE=fail: must fail, and the compiler's output must match its
# expectation (below).
# PCH (clang++ only, tests/CMakeLists.txt): the precompiled pipetype/host.hpp to start from.
set(pch_flags "")
if(PCH)
  set(pch_flags -include-pch ${PCH})
endif()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${pch_flags} ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(PCH AND err MATCHES "modified since the precompiled header")  # a header edited since the build
  execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SRC}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
endif()
if(MODE STREQUAL "pass")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expected ${SRC} to compile, it did not:\n${err}")
  endif()
  return()
endif()
# The expectation: the file's leading `// expect: REGEX` lines, each read whole (the formatter
# keeps off them: .clang-format's CommentPragmas); the output must match every one.
file(STRINGS ${SRC} lines)
set(regexes "")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^// expect: ")
    break()
  endif()
  string(REGEX REPLACE "^// expect: " "" regex "${line}")
  if(regex STREQUAL "")
    message(FATAL_ERROR "${SRC}: an empty `// expect:` line")
  endif()
  list(APPEND regexes "${regex}")
endforeach()
if(NOT regexes)
  message(FATAL_ERROR "${SRC}: the first line must be `// expect: REGEX`")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "expected ${SRC} to fail to compile, it compiled")
endif()
string(REPLACE "\n" " " flat "${out}${err}")
foreach(regex IN LISTS regexes)
  if(NOT flat MATCHES "${regex}")
    message(FATAL_ERROR "${SRC} failed to compile, but the message does not match `${regex}`:\n${err}")
  endif()
  message(STATUS "rejected as expected: ${regex}")
endforeach()
