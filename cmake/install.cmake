# `cmake --install build --prefix P`: the policyc command line (bin/; its helper for old opsets in
# libexec/policyc), the runtime library and its headers with a CMake package (find_package(policyc) -> policyc::runtime) and a pkg-config file,
# the Python module where P's Python finds it, and the scripts `policyc bench` runs (share/policyc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS policyc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The importer's helper for old opsets, where the installed command line looks for it
# (frontend/src/onnx_upgrade.cpp: ../libexec/policyc beside bin/).
install(TARGETS policyc-onnx-upgrade RUNTIME DESTINATION libexec/policyc)

set_target_properties(policyc_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(policyc_support PROPERTIES EXPORT_NAME support)
install(TARGETS policyc_runtime policyc_support EXPORT policycTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/ ${PROJECT_SOURCE_DIR}/support/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT policycTargets NAMESPACE policyc:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/policyc)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/policycConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/policycConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/policyc
  PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/policycConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/policycConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/policycConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/policyc)
configure_file(${PROJECT_SOURCE_DIR}/cmake/policyc.pc.in ${CMAKE_CURRENT_BINARY_DIR}/policyc.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/policyc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# What `policyc bench --plot` and `--baseline torch` run, found beside the installed command line.
install(FILES ${PROJECT_SOURCE_DIR}/bench/plot.py ${PROJECT_SOURCE_DIR}/bench/progress.py
  ${PROJECT_SOURCE_DIR}/bench/atomic_file.py DESTINATION ${CMAKE_INSTALL_DATADIR}/policyc/bench)
install(FILES ${PROJECT_SOURCE_DIR}/bench/peers/torch_baseline.py ${PROJECT_SOURCE_DIR}/bench/peers/peers.py
  ${PROJECT_SOURCE_DIR}/bench/peers/onnx_torch.py DESTINATION ${CMAKE_INSTALL_DATADIR}/policyc/bench/peers)
