# xgrammar (constrained decoding: src/grammar/): its C++ library, built from the PyPI sdist of the
# version pinned in scripts/xgrammar-version, which scripts/setup.sh downloads and unpacks into
# ~/.cache/fuselm-deps/xgrammar-<version>/ ($FUSELM_DEPS_CACHE if set) and passes here as
# FUSELM_XGRAMMAR_DIR. Its Python bindings are off. Its directory's flags (C++17, -Werror, -flto)
# stay in its own CMake scope; its own target is compiled at -O3 (the mask is on the sampling
# path), without LTO (a static archive of GIMPLE-only objects would need gcc-ar) and without
# -Werror (a newer compiler's warning must not break our build).
file(STRINGS ${CMAKE_SOURCE_DIR}/scripts/xgrammar-version FUSELM_XGRAMMAR_VERSION LIMIT_COUNT 1)
set(deps_cache "$ENV{HOME}/.cache/fuselm-deps")
if(DEFINED ENV{FUSELM_DEPS_CACHE})
  set(deps_cache "$ENV{FUSELM_DEPS_CACHE}")
endif()
set(FUSELM_XGRAMMAR_DIR "${deps_cache}/xgrammar-${FUSELM_XGRAMMAR_VERSION}"
    CACHE PATH "the unpacked xgrammar sdist (scripts/setup.sh fetches it)")
if(NOT EXISTS ${FUSELM_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h)
  message(FATAL_ERROR "xgrammar ${FUSELM_XGRAMMAR_VERSION} sources not found at FUSELM_XGRAMMAR_DIR="
                      "'${FUSELM_XGRAMMAR_DIR}': run scripts/setup.sh, which downloads the pinned "
                      "sdist and configures the build with its path")
endif()
# xgrammar's CMakeLists reads its options from ${CMAKE_BINARY_DIR}/config.cmake before its own
# cmake/config.cmake (which turns the Python bindings on): ours, written here, keeps them off.
file(WRITE ${CMAKE_BINARY_DIR}/config.cmake
     "# written by fuselm's cmake/xgrammar.cmake: xgrammar's build options\n"
     "set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n"
     "set(XGRAMMAR_ENABLE_CPPTRACE OFF)\nset(XGRAMMAR_ENABLE_COVERAGE OFF)\n"
     "set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)\n")
add_subdirectory(${FUSELM_XGRAMMAR_DIR} ${CMAKE_BINARY_DIR}/xgrammar EXCLUDE_FROM_ALL SYSTEM)
target_compile_options(xgrammar PRIVATE -O3 -fno-lto -Wno-error)
# Eight sources to a translation unit, as ours (CMakeLists.txt, FUSELM_UNITY): 312 -> 113 CPU-s.
set_target_properties(xgrammar PROPERTIES UNITY_BUILD ${FUSELM_UNITY} UNITY_BUILD_BATCH_SIZE 8)
