# Cross toolchain for the aarch64 compile check (CMakePresets.json "cross-aarch64"): Debian's
# gcc-aarch64-linux-gnu. Only the library is built (EMBER_LIBRARY_ONLY): the check is that the
# generic kernel variant and everything around it compile, warnings as errors, off x86.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
