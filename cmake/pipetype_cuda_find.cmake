# Finds the CUDA toolkit and NCCL and defines pipetype::cuda (pipetype::pipetype + CUDA::cudart +
# NCCL) when both are there; sets PIPETYPE_HAS_CUDA. Used by the build (pipetype_cuda.cmake) and
# installed with the package, so `find_package(pipetype)` gives pipetype::cuda too.
#
# NCCL has no CMake target (CMake 3.25's FindCUDAToolkit has none): it is found by hand, from
# NCCL_ROOT / NCCL_HOME (a cache variable or the environment; e.g. the Python package
# nvidia-nccl's directory), the directory the installed package was built with, and then the
# CUDA toolkit's own include and lib directories.
set(PIPETYPE_HAS_CUDA OFF)
if(TARGET pipetype::cuda)
  set(PIPETYPE_HAS_CUDA ON)
  return()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "pipetype: no CUDA toolkit found; pipetype::cuda is not defined (everything else works)")
  return()
endif()
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "Where NCCL is installed (include/nccl.h, lib/libnccl.so)")
find_path(PIPETYPE_NCCL_INCLUDE_DIR nccl.h
          HINTS ${NCCL_ROOT}/include $ENV{NCCL_HOME}/include ${PIPETYPE_NCCL_BUILT_WITH}/include
                ${CUDAToolkit_INCLUDE_DIRS})
find_library(PIPETYPE_NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${NCCL_ROOT}/lib $ENV{NCCL_HOME}/lib ${PIPETYPE_NCCL_BUILT_WITH}/lib ${CUDAToolkit_LIBRARY_DIR})
if(NOT PIPETYPE_NCCL_INCLUDE_DIR OR NOT PIPETYPE_NCCL_LIBRARY)
  message(STATUS "pipetype: CUDA ${CUDAToolkit_VERSION} found but not NCCL (set NCCL_ROOT); pipetype::cuda is not defined")
  return()
endif()
# GLOBAL, and by file rather than CUDA::cudart (directory-scoped), so that a project that
# add_subdirectory()s pipetype sees the target and everything it links
add_library(pipetype::cuda INTERFACE IMPORTED GLOBAL)
set_target_properties(pipetype::cuda PROPERTIES
  INTERFACE_LINK_LIBRARIES "pipetype::pipetype;${CUDA_cudart_LIBRARY};${PIPETYPE_NCCL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS};${PIPETYPE_NCCL_INCLUDE_DIR}")
set(PIPETYPE_HAS_CUDA ON)
message(STATUS "pipetype: CUDA ${CUDAToolkit_VERSION}, NCCL ${PIPETYPE_NCCL_LIBRARY}: pipetype::cuda")
