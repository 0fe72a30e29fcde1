# `cmake --install` + find_package(ember) + pkg-config: a tiny consumer builds and runs against the
# install tree alone (tests/install/check.sh).
# A sanitized library needs a consumer built with the same runtime in front.
set(_ember_consumer_flags "")
if(EMBER_SANITIZE)
  set(_ember_consumer_flags "-fsanitize=address,undefined")
endif()
add_test(NAME install.consumer COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/check.sh ${PROJECT_BINARY_DIR}
                                       ${PROJECT_SOURCE_DIR} "${_ember_consumer_flags}")
set_tests_properties(install.consumer PROPERTIES TIMEOUT 300 LABELS install)
