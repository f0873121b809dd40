# The optional LibTorch part: pipetype::torch = pipetype + LibTorch's CPU libraries (torch_cpu,
# c10), when LibTorch is found (include/pipetype/torch/, docs/14_libtorch.md).
#
# Where LibTorch comes from, first found wins: Torch_DIR or CMAKE_PREFIX_PATH as usual, else the
# Python whose torch wheel ships it (the wheel holds LibTorch's headers, libraries and CMake
# config): PIPETYPE_TORCH_PYTHON, else the virtual environment `bash run.sh test` makes under
# ${XDG_CACHE_HOME:-~/.cache}/pipetype/torch-venv.
#
# Only the CPU libraries are linked: the wheel's torch_cuda needs the wheel's own NCCL (newer than a
# CUDA toolkit's) on the link line, which a CUDA build of the adapter will add. LibTorch's config is
# found inside a function, so the variables it sets (CUDA flags, its own paths) stay there; the
# targets it makes are global.
# Sets PIPETYPE_HAS_TORCH (the target exists) and PIPETYPE_TORCH_WHY (why not, in one line).

# pipetype_torch_python(<var>): the Python with torch that the tests against PyTorch's runtime use
# and LibTorch may come from: PIPETYPE_TORCH_PYTHON, else the test command's virtual environment
# (empty when neither is there).
function(pipetype_torch_python out)
  set(py "${PIPETYPE_TORCH_PYTHON}")
  if(NOT py)
    if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
      set(cache "$ENV{XDG_CACHE_HOME}")
    else()
      set(cache "$ENV{HOME}/.cache")
    endif()
    if(EXISTS "${cache}/pipetype/torch-venv/bin/python")
      set(py "${cache}/pipetype/torch-venv/bin/python")
    endif()
  endif()
  set(${out} "${py}" PARENT_SCOPE)
endfunction()

set(PIPETYPE_HAS_TORCH OFF)
set(PIPETYPE_TORCH_WHY "")
if(NOT PIPETYPE_TORCH)
  set(PIPETYPE_TORCH_WHY "PIPETYPE_TORCH is OFF")
  return()
endif()

function(pipetype_find_torch)
  set(prefix "")
  if(NOT Torch_DIR)
    pipetype_torch_python(py)
    if(py)
      execute_process(COMMAND ${py} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                      OUTPUT_VARIABLE prefix RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(NOT rc EQUAL 0)
        set(prefix "")
      endif()
    endif()
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${prefix})
  # LibTorch's config warns of what this CPU use needs not (its profiler library, our CUDA
  # architectures, which it ignores): quiet here, where nothing of ours is said
  set(CMAKE_MESSAGE_LOG_LEVEL ERROR)
  find_package(Torch QUIET)
  unset(CMAKE_MESSAGE_LOG_LEVEL)
  if(NOT Torch_FOUND OR NOT TARGET torch_cpu_library OR NOT TARGET c10)
    set(PIPETYPE_TORCH_FOUND OFF PARENT_SCOPE)
    return()
  endif()
  add_library(pipetype_torch INTERFACE)
  add_library(pipetype::torch ALIAS pipetype_torch)
  target_link_libraries(pipetype_torch INTERFACE pipetype::pipetype torch_cpu_library c10)
  # LibTorch's headers are the system's: our warnings-as-errors stay on our own code
  target_include_directories(pipetype_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  set(PIPETYPE_TORCH_FOUND ON PARENT_SCOPE)
  set(PIPETYPE_TORCH_VERSION "${Torch_VERSION}" PARENT_SCOPE)
endfunction()

pipetype_find_torch()
if(PIPETYPE_TORCH_FOUND)
  set(PIPETYPE_HAS_TORCH ON)
  message(STATUS "pipetype: LibTorch ${PIPETYPE_TORCH_VERSION} found: pipetype::torch, its tests and examples")
else()
  set(PIPETYPE_TORCH_WHY "LibTorch not found (give -DTorch_DIR=, or -DPIPETYPE_TORCH_PYTHON= a Python with torch)")
endif()
