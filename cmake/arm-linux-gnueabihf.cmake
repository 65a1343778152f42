# Cross-compiles for 32-bit ARM Linux, hard-float (Debian armhf: ARMv7-A + VFPv3-D16, Thumb-2) with
# Debian's g++-arm-linux-gnueabihf. Only the scalar kernels are built (the NEON file is AArch64
# code). Runs on x86 under qemu-user:
#   cmake -S . -B build-armhf -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/arm-linux-gnueabihf.cmake \
#         -DPICOLM_BUILD_SERVER=OFF
#   qemu-arm -L /usr/arm-linux-gnueabihf build-armhf/bin/test_kernels
# Debian's armhf libc and libstdc++ need ARMv7, so these binaries suit a Raspberry Pi 2/3/4 on a
# 32-bit OS, not a Pi Zero/1 (ARMv6): build natively on Raspberry Pi OS there (README).
#
# PICOLM_CROSS_EXTRA_ROOT (optional): extra target libraries unpacked from Debian armhf packages.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
# GCC notes on every std::sort of 64-bit pairs that their argument passing changed in GCC 7.1 (an
# ABI note for mixing with objects built by GCC < 7, which nothing here does).
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")

set(CMAKE_FIND_ROOT_PATH /usr/arm-linux-gnueabihf ${PICOLM_CROSS_EXTRA_ROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm -L /usr/arm-linux-gnueabihf)
