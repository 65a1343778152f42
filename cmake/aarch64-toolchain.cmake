# Cross-compile for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu; run the results with
# qemu-user: `qemu-aarch64 -L /usr/aarch64-linux-gnu build-arm/bin/test_kernels`.
#   cmake -S . -B build-arm -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-toolchain.cmake -DPICOLM_BUILD_SERVER=OFF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
# Header-only dependencies (Catch2) live in the host's /usr/include.
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
# Packages must be ARM ones; to configure the whole tree while building only targets that need no
# packages (e.g. test_kernels), pass -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH
# -Dsimdjson_DIR=/usr/lib/x86_64-linux-gnu/cmake/simdjson (grammar/ asks for it at configure time).
if(NOT DEFINED CMAKE_FIND_ROOT_PATH_MODE_PACKAGE)
  set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
