# Every external dependency is found here, once. Configure stops with a message naming the
# missing piece (and the Debian package that provides it) rather than failing later in a build.

find_package(MPI 3.0 REQUIRED COMPONENTS C CXX)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)   # crc32 of checkpoint tensors (Debian: zlib1g-dev)
find_package(Boost REQUIRED)   # header-only: Boost.CRC's CRC-32C of TensorBoard records (Debian: libboost-dev)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "shardrl needs a parallel (MPI-IO) HDF5, but the HDF5 found (${HDF5_C_INCLUDE_DIRS}) is serial. "
    "On Debian install libhdf5-openmpi-dev, or point HDF5_C_COMPILER_EXECUTABLE at a parallel h5pcc.")
endif()

find_package(Kokkos REQUIRED)
# Debian's Kokkos::kokkos names a non-existent /usr/lib/include: resolve the real directory.
if(Kokkos_INCLUDE_DIRS)
  get_filename_component(SHARDRL_KOKKOS_INC "${Kokkos_INCLUDE_DIRS}" REALPATH)
  if(EXISTS "${SHARDRL_KOKKOS_INC}")
    set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${SHARDRL_KOKKOS_INC}")
  endif()
endif()

set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread REQUIRED)

find_package(CLI11 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
# src/text: the Hugging Face tokenizer's pre-tokenizer regexes (Unicode properties, JIT) and NFC.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)    # Debian: libpcre2-dev
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc) # Debian: libutf8proc-dev

# CUDA: required for the GPU build; on CPU builds it is looked for only so that the CUDA-only
# host sources (NCCL communicator, cuBLAS handle) still compile and CI catches breakage in them.
if(SHARDRL_ENABLE_CUDA)
  find_package(CUDAToolkit)
  if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublas)
    message(FATAL_ERROR "SHARDRL_ENABLE_CUDA=ON needs the CUDA Toolkit with cuBLAS (set CUDAToolkit_ROOT).")
  endif()
  if(NOT Kokkos_ENABLE_CUDA)
    message(FATAL_ERROR
      "SHARDRL_ENABLE_CUDA=ON needs a Kokkos built with its CUDA backend, but the Kokkos found at "
      "${Kokkos_DIR} has none (Debian's libtrilinos-kokkos-dev is Serial only). Build Kokkos 4.x with "
      "-DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_HOPPER90=ON and pass -DKokkos_ROOT=<its prefix>.")
  endif()
else()
  find_package(CUDAToolkit QUIET)
endif()

if(CUDAToolkit_FOUND)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(shardrl_nccl UNKNOWN IMPORTED)
    set_target_properties(shardrl_nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    add_library(NCCL::nccl ALIAS shardrl_nccl)
  elseif(SHARDRL_ENABLE_CUDA)
    message(FATAL_ERROR "SHARDRL_ENABLE_CUDA=ON needs NCCL: nccl.h/libnccl not found (set NCCL_HOME).")
  endif()
endif()

# nvcc for the CUDA-only kernels (kernels/flash_attention.cu): required on GPU builds; on CPU
# builds used, where the toolkit has it, to compile them (not link) so that CI catches breakage.
if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE AND NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
endif()
if(CMAKE_CUDA_COMPILER)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)   # Hopper (H100, H200); the kernels need sm_80 or newer
  endif()
  enable_language(CUDA)
elseif(SHARDRL_ENABLE_CUDA)
  message(FATAL_ERROR "SHARDRL_ENABLE_CUDA=ON needs nvcc (set CMAKE_CUDA_COMPILER or CUDAToolkit_ROOT).")
endif()

# cuDNN 9 (optional): its fused flash attention for training (kernels/cudnn_attention.cpp,
# model.attention = "cudnn"). Looked for under CUDNN_ROOT (e.g. a Python environment's
# nvidia/cudnn, which ships only libcudnn.so.9), then beside the CUDA toolkit. Without it the
# GPU build trains with its own flash kernels; on CPU builds, when found, the source is
# compiled (not linked) so that CI catches breakage in it.
if(CUDAToolkit_FOUND)
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64)
  if(CUDNN_INCLUDE_DIR)
    file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" SHARDRL_CUDNN_MAJOR REGEX "define CUDNN_MAJOR ")
    string(REGEX MATCH "[0-9]+" SHARDRL_CUDNN_MAJOR "${SHARDRL_CUDNN_MAJOR}")
    if(NOT SHARDRL_CUDNN_MAJOR EQUAL 9)
      message(STATUS "cuDNN at ${CUDNN_INCLUDE_DIR} is version ${SHARDRL_CUDNN_MAJOR}, not 9: not used")
      unset(CUDNN_INCLUDE_DIR CACHE)
    endif()
  endif()
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    add_library(shardrl_cudnn UNKNOWN IMPORTED)
    set_target_properties(shardrl_cudnn PROPERTIES
      IMPORTED_LOCATION "${CUDNN_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
    add_library(CUDNN::cudnn ALIAS shardrl_cudnn)
    message(STATUS "cuDNN: ${CUDNN_LIBRARY}")
  else()
    message(STATUS "cuDNN 9 not found (set CUDNN_ROOT): model.attention = \"cudnn\" unavailable")
  endif()
endif()
