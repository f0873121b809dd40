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

find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "pipetype: no CUDA toolkit found; the CUDA executor is skipped (everything else builds)")
  return()
endif()
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "Where NCCL is installed (include/nccl.h, lib/libnccl.so)")
find_path(PIPETYPE_NCCL_INCLUDE_DIR nccl.h
          HINTS ${NCCL_ROOT}/include $ENV{NCCL_HOME}/include ${CUDAToolkit_INCLUDE_DIRS})
find_library(PIPETYPE_NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${NCCL_ROOT}/lib $ENV{NCCL_HOME}/lib ${CUDAToolkit_LIBRARY_DIR})
if(NOT PIPETYPE_NCCL_INCLUDE_DIR OR NOT PIPETYPE_NCCL_LIBRARY)
  message(STATUS "pipetype: CUDA ${CUDAToolkit_VERSION} found but not NCCL (set NCCL_ROOT); the CUDA executor is skipped")
  return()
endif()
add_library(pipetype_nccl SHARED IMPORTED)
set_target_properties(pipetype_nccl PROPERTIES IMPORTED_LOCATION "${PIPETYPE_NCCL_LIBRARY}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${PIPETYPE_NCCL_INCLUDE_DIR}")
add_library(pipetype_cuda INTERFACE)
add_library(pipetype::cuda ALIAS pipetype_cuda)
target_link_libraries(pipetype_cuda INTERFACE pipetype::pipetype CUDA::cudart pipetype_nccl)
set(PIPETYPE_HAS_CUDA ON)
message(STATUS "pipetype: CUDA ${CUDAToolkit_VERSION}, NCCL ${PIPETYPE_NCCL_LIBRARY}: pipetype::cuda")

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
