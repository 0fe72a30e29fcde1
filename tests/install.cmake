# `cmake --install` + find_package(ember) + pkg-config: a tiny consumer builds and runs against the
# install tree alone (tests/install/check.sh).
add_test(NAME install.consumer COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/check.sh ${PROJECT_BINARY_DIR}
                                       ${PROJECT_SOURCE_DIR})
set_tests_properties(install.consumer PROPERTIES TIMEOUT 300 LABELS install)
