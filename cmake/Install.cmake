# `cmake --install <build> --prefix <dir>`: the libraries, headers (with the
# TableGen-generated .inc files), mhc-opt and mhc-compile, and an exported
# package, so that a C++ project gets the dialect, passes, codegen and runtime
# with find_package(mhc) (test/install/ is such a project).
include(CMakePackageConfigHelpers)

set(MHC_LIBRARIES MhcSupport MhcRuntime MhcDialect MhcPasses MhcCodegen)
install(TARGETS ${MHC_LIBRARIES} EXPORT mhcTargets
  ARCHIVE DESTINATION lib LIBRARY DESTINATION lib
  INCLUDES DESTINATION include)
install(TARGETS mhc-opt mhc-compile RUNTIME DESTINATION bin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mhc ${PROJECT_BINARY_DIR}/include/mhc
  DESTINATION include FILES_MATCHING PATTERN "*.h" PATTERN "*.inc" PATTERN "*.td"
  PATTERN CMakeFiles EXCLUDE)

set(MHC_CMAKE_DIR lib/cmake/mhc)
install(EXPORT mhcTargets NAMESPACE mhc:: DESTINATION ${MHC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mhcConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mhcConfig.cmake INSTALL_DESTINATION ${MHC_CMAKE_DIR})
install(FILES ${PROJECT_BINARY_DIR}/mhcConfig.cmake DESTINATION ${MHC_CMAKE_DIR})
