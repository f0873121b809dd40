# pipetype_large_plans(<target>)
#
# make_plan runs generation, verification and lowering inside a constant expression. Plans with
# thousands of actions (e.g. 1F1B with 16 ranks and 128 microbatches) pass the compilers'
# default evaluation limits: g++ stops at -fconstexpr-ops-limit=33554432 and clang at
# -fconstexpr-steps=1048576. This raises both (and nvcc's EDG front end limit) for one target.
function(pipetype_large_plans target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-fconstexpr-ops-limit=4294967296 -fconstexpr-loop-limit=16777216>
    $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-fconstexpr-steps=2000000000>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcudafe=--max_cost_constexpr_call=2000000000>)
endfunction()
