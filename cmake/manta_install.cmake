# install() and export() so users can find_package(manta) as well as add_subdirectory.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/manta DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS manta manta_runtime manta_bridge manta_process manta_ipc manta_store manta_observe
        EXPORT manta_targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT manta_targets NAMESPACE manta:: FILE manta-targets.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/manta)
export(EXPORT manta_targets NAMESPACE manta:: FILE ${PROJECT_BINARY_DIR}/manta-targets.cmake)

configure_package_config_file(cmake/manta-config.cmake.in
  ${PROJECT_BINARY_DIR}/manta-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/manta)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/manta-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/manta-config.cmake ${PROJECT_BINARY_DIR}/manta-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/manta)
