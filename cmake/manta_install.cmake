# install() and export() so users can find_package(manta) as well as add_subdirectory.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/manta DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(manta_installed_libraries manta manta_runtime manta_process manta_ipc manta_store manta_observe)
if(MANTA_ENABLE_BRIDGE)
  list(APPEND manta_installed_libraries manta_cluster_layer manta_bridge)
endif()
install(TARGETS ${manta_installed_libraries}
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

# pkg-config, for builds without CMake: the static libraries in link order and
# what they need (MPI's and CUDA's libraries too, when manta was built with them).
set(manta_pc_extra "")
if(MANTA_MPI_FOUND)
  foreach(lib IN LISTS MPI_CXX_LIBRARIES)
    string(APPEND manta_pc_extra " ${lib}")
  endforeach()
endif()
if(MANTA_CUDA_FOUND)
  string(APPEND manta_pc_extra " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt")
endif()
# The prefix is found from the file's own place, so `cmake --install --prefix P` works.
file(RELATIVE_PATH manta_pc_to_prefix "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
# With the cluster: its layer first, kept whole by the linker (lib/CMakeLists.txt), and the bridge.
set(manta_pc_cluster "")
set(manta_pc_bridge "")
if(MANTA_ENABLE_BRIDGE)
  set(manta_pc_cluster "-Wl,--undefined=manta_cluster_layer -lmanta_cluster_layer ")
  set(manta_pc_bridge " -lmanta_bridge")
endif()
configure_file(cmake/manta.pc.in ${PROJECT_BINARY_DIR}/manta.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/manta.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
