# The optional LibTorch part: pipetype::torch = pipetype + LibTorch's CPU libraries (torch_cpu,
# c10), when LibTorch is found (include/pipetype/torch/, docs/14_libtorch.md).
#
# Where LibTorch comes from, first found wins: Torch_DIR or CMAKE_PREFIX_PATH as usual, else the
# Python whose torch wheel ships it (the wheel holds LibTorch's headers, libraries and CMake
# config): PIPETYPE_TORCH_PYTHON, else the virtual environment `bash run.sh test` makes under
# ${XDG_CACHE_HOME:-~/.cache}/pipetype/torch-venv.
#
# pipetype::torch links only the CPU libraries. Where a CUDA toolkit is found too (pipetype::cuda)
# and LibTorch has CUDA, pipetype::torch_cuda adds LibTorch's CUDA libraries (torch_cuda, c10_cuda)
# and the NCCL LibTorch ships (the wheel's nvidia/nccl, newer than a toolkit's: libtorch_cuda needs
# its symbols), whose nccl.h pipetype's cuda/ headers then see; it does not link pipetype::cuda,
# whose NCCL would be the toolkit's. LibTorch's config is found inside a function, so the variables
# it sets (CUDA flags, its own paths) stay there; the targets it makes are global.
# Sets PIPETYPE_HAS_TORCH (the target exists), PIPETYPE_TORCH_WHY (why not, in one line) and
# PIPETYPE_HAS_TORCH_CUDA (pipetype::torch_cuda exists).

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
set(PIPETYPE_HAS_TORCH_CUDA OFF)
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
  set(PIPETYPE_TORCH_CUDA_FOUND OFF PARENT_SCOPE)
  if(TARGET pipetype::cuda AND TARGET torch_cuda_library AND TARGET c10_cuda)
    get_filename_component(site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
    find_library(PIPETYPE_TORCH_NCCL_LIBRARY NAMES nccl libnccl.so.2
                 HINTS "${site}/nvidia/nccl/lib" "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
    find_path(PIPETYPE_TORCH_NCCL_INCLUDE_DIR nccl.h HINTS "${site}/nvidia/nccl/include" NO_DEFAULT_PATH)
    # the CUDA runtime the wheel ships, which its libraries were built against, in place of the
    # toolkit's (older) one that LibTorch's config found for torch::cudart
    find_library(PIPETYPE_TORCH_CUDART_LIBRARY NAMES libcudart.so.13 libcudart.so.12 cudart
                 HINTS "${site}/nvidia/cu13/lib" "${site}/nvidia/cuda_runtime/lib" NO_DEFAULT_PATH)
    if(PIPETYPE_TORCH_NCCL_LIBRARY AND PIPETYPE_TORCH_NCCL_INCLUDE_DIR)
      add_library(pipetype_torch_cuda INTERFACE)
      add_library(pipetype::torch_cuda ALIAS pipetype_torch_cuda)
      target_link_libraries(pipetype_torch_cuda INTERFACE pipetype_torch torch_cuda_library c10_cuda
                                                          ${PIPETYPE_TORCH_NCCL_LIBRARY})
      if(PIPETYPE_TORCH_CUDART_LIBRARY AND TARGET torch::cudart)  # LibTorch's runtime, not the toolkit's it found
        set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES ${PIPETYPE_TORCH_CUDART_LIBRARY})
      endif()
      target_include_directories(pipetype_torch_cuda SYSTEM BEFORE INTERFACE ${PIPETYPE_TORCH_NCCL_INCLUDE_DIR}
                                                                            ${CUDAToolkit_INCLUDE_DIRS})
      set(PIPETYPE_TORCH_CUDA_FOUND ON PARENT_SCOPE)
    endif()
  endif()
endfunction()

pipetype_find_torch()
if(PIPETYPE_TORCH_FOUND)
  set(PIPETYPE_HAS_TORCH ON)
  message(STATUS "pipetype: LibTorch ${PIPETYPE_TORCH_VERSION} found: pipetype::torch, its tests and examples")
  set(PIPETYPE_HAS_TORCH_CUDA ${PIPETYPE_TORCH_CUDA_FOUND})
  if(PIPETYPE_HAS_TORCH_CUDA)
    message(STATUS "pipetype: LibTorch has CUDA, with NCCL ${PIPETYPE_TORCH_NCCL_LIBRARY}: pipetype::torch_cuda")
  endif()
else()
  set(PIPETYPE_TORCH_WHY "LibTorch not found (give -DTorch_DIR=, or -DPIPETYPE_TORCH_PYTHON= a Python with torch)")
endif()
