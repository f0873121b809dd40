# The optional CUDA part: pipetype::cuda = pipetype + CUDA::cudart + NCCL, when both are found.
#
# NCCL has no CMake target (CMake 3.25's FindCUDAToolkit has none): it is found by hand, from
# NCCL_ROOT / NCCL_HOME (a cache variable or the environment; e.g. the Python package
# nvidia-nccl's directory) and then the CUDA toolkit's own include and lib directories.
# Sets PIPETYPE_HAS_CUDA (the target exists) and PIPETYPE_HAS_NVCC (the CUDA language is enabled,
# with the C++20 flag CMake 3.25 does not know for nvcc).
set(PIPETYPE_HAS_CUDA OFF)
set(PIPETYPE_HAS_NVCC OFF)
if(NOT PIPETYPE_CUDA)
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/pipetype_cuda_find.cmake)
if(NOT PIPETYPE_HAS_CUDA)
  return()
endif()

if(NOT PIPETYPE_NVCC)
  return()
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # H100/H200; override on the command line
  endif()
  enable_language(CUDA)
  if(CMAKE_VERSION VERSION_LESS 3.26)  # CMake 3.25 has no C++20 flag for nvcc
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(PIPETYPE_HAS_NVCC ON)
endif()
