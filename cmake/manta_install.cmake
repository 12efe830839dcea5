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
configure_file(cmake/manta.pc.in ${PROJECT_BINARY_DIR}/manta.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/manta.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
