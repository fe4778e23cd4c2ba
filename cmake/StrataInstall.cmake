# StrataInstall.cmake - package files around the StrataTargets export set:
# the CMake package (find_package(Strata)) and pkg-config's strata.pc.
# Included once, at the end of the top-level CMakeLists.txt, after every
# folder has added its install(TARGETS ... EXPORT StrataTargets) lines.
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

if(NOT TARGET strata)
  message(STATUS "StrataInstall: no libstrata target (libtrace not configured): no package files")
  return()
endif()

set(STRATA_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Strata)

install(EXPORT StrataTargets
        NAMESPACE Strata::
        FILE StrataTargets.cmake
        DESTINATION ${STRATA_CMAKE_INSTALL_DIR})

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/StrataConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/StrataConfig.cmake
  INSTALL_DESTINATION ${STRATA_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR)
# 0.x: a new minor version may break the API.
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/cmake/StrataConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/StrataConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/StrataConfigVersion.cmake
        DESTINATION ${STRATA_CMAKE_INSTALL_DIR})

# tp-sync/CMakeLists.txt installs the object as <libdir>/strata/tp_sync.o,
# a path that does not depend on the build type.
set(STRATA_PC_TP_SYNC "\${libdir}/strata/tp_sync.o")
# Relocatable: prefix is found from the .pc file's own directory, so that
# `cmake --install --prefix P` works for any P chosen at install time.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(STRATA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _strata_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" _strata_up "${_strata_up}")
  set(STRATA_PC_PREFIX "\${pcfiledir}/${_strata_up}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/strata.pc.in ${CMAKE_BINARY_DIR}/cmake/strata.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/strata.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
