# DLRM app (apps/ember): dense part, data sets, metrics, training driver and CLI.
# The oracle lives in support/dlrm/ (its own library: it implements the app's backend seam).
add_library(ember_dlrm_support STATIC ${CMAKE_CURRENT_SOURCE_DIR}/support/dlrm/naive_dlrm.c)
target_include_directories(ember_dlrm_support PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support/dlrm)
target_link_libraries(ember_dlrm_support PUBLIC ember_app ember_test_support)

ember_unit_test(dlrm_dense ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_dense.c)
target_link_libraries(test_dlrm_dense PRIVATE ember_dlrm_support)

ember_unit_test(dlrm_data ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_data.c)
target_link_libraries(test_dlrm_data PRIVATE ember_dlrm_support)
