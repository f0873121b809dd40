# Runs CLANG_FORMAT (--style=file: the repository's .clang-format) on FILE and fails unless the
# output is the file unchanged (tests/CMakeLists.txt, "format: ...").
execute_process(COMMAND ${CLANG_FORMAT} --style=file ${FILE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CLANG_FORMAT} failed on ${FILE}: ${err}")
endif()
file(READ ${FILE} before)
if(NOT out STREQUAL before)
  message(FATAL_ERROR "the formatter changes ${FILE}:\n${out}")
endif()
message(STATUS "the formatter leaves ${FILE} as it is")
