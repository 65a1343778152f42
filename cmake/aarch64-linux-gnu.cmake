# Cross-compiles for 64-bit ARM Linux (Raspberry Pi 3/4/5 with a 64-bit OS, Graviton, Ampere) with
# Debian's g++-aarch64-linux-gnu. The binaries run on x86 under qemu-user, which ctest uses by itself:
#   cmake -S . -B build-aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DPICOLM_BUILD_SERVER=OFF
#   qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/bin/test_kernels
# scripts/test-arm.sh does all of this, with the ARM simdjson the golden tests need.
#
# PICOLM_CROSS_EXTRA_ROOT (optional): a folder holding extra target libraries unpacked from Debian's
# arm64 packages (usr/include, usr/lib/aarch64-linux-gnu); find_package searches it next to the
# cross libc, and never the host's x86 libraries.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu ${PICOLM_CROSS_EXTRA_ROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Header-only dependencies (Catch2, cpp-httplib) are architecture-independent and live in the
# host's /usr/include.
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)

# ctest (and add_custom_command with a built tool) run target programs through qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
