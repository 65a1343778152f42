// Version and git commit of this build (generated at build time by tools/build_info.cmake).
#pragma once

namespace picolm::build_info {
const char* version();  // the CMake project version, e.g. "0.1.0"
const char* commit();   // short git commit, "+dirty" when the tree had changes, or "unknown"
}  // namespace picolm::build_info
