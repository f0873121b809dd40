# Runs EXE with ARGS (a ;-list); checks the exit code is RC and stdout+stderr match REGEX.
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL RC)
  message(FATAL_ERROR "exit code ${rc}, expected ${RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
string(REPLACE "\n" " " flat "${out}${err}")
if(NOT flat MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match `${REGEX}`\nstdout:\n${out}\nstderr:\n${err}")
endif()
