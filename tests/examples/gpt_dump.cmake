# Runs GPT (examples/gpt) for one pipelined step with --dump DIR, then PYTHON CHECK DIR
# (tests/pytorch/check_gpt_dump.py): the loss and every gradient of the pipelined step against
# PyTorch's autograd on the same weights and batch. Fails with both tools' output otherwise.
# ARGS: more flags for gpt (a list: -DARGS=--dp;2;--fsdp).
file(REMOVE_RECURSE "${DIR}")
execute_process(COMMAND ${GPT} --schedule zb-h1 --ranks 2 --microbatches 4 --layers 3 --heads 2 --width 24 --seq 12
                        --rows 2 --steps 1 --dump ${DIR} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt --dump: exit code ${rc}\n${out}${err}")
endif()
execute_process(COMMAND ${PYTHON} ${CHECK} ${DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_gpt_dump.py: exit code ${rc}")
endif()
