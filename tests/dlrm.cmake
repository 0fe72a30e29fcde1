# DLRM app (apps/ember): dense part, data sets, metrics, training driver and CLI.
# The oracle lives in support/dlrm/ (its own library: it implements the app's backend seam).
add_library(ember_dlrm_support STATIC ${CMAKE_CURRENT_SOURCE_DIR}/support/dlrm/naive_dlrm.c)
target_include_directories(ember_dlrm_support PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support/dlrm)
target_link_libraries(ember_dlrm_support PUBLIC ember_app ember_test_support)

ember_unit_test(dlrm_dense ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_dense.c)
target_link_libraries(test_dlrm_dense PRIVATE ember_dlrm_support)

ember_unit_test(dlrm_data ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_data.c)
target_link_libraries(test_dlrm_data PRIVATE ember_dlrm_support)

# Training under MPI on the naive replicated collection (independent of the library); the same
# cases run on the sharded collection once src/shard/ exists (EMBER_HAVE_SEBC, apps/ember).
ember_test_exe(test_train ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_train.c)
target_link_libraries(test_train PRIVATE ember_dlrm_support)
set(EMBER_TRAIN_BACKENDS naive)
if(EMBER_HAVE_SEBC)
  list(APPEND EMBER_TRAIN_BACKENDS sebc)
endif()
foreach(backend ${EMBER_TRAIN_BACKENDS})
  ember_mpi_test(dist.train.${backend}.model_grads.np1 1 test_train --backend ${backend} --case step_gradients)
  ember_mpi_test(dist.train.${backend}.w1_vs_w2.np2 2 test_train --backend ${backend} --case loss_curve)
  ember_mpi_test(dist.train.${backend}.grad_sum.np2 2 test_train --backend ${backend} --case grad_sum)
  ember_mpi_test(dist.train.${backend}.learns.np2 2 test_train --backend ${backend} --case learns)
  ember_mpi_test(dist.train.${backend}.criteo.np2 2 test_train --backend ${backend} --case trains_on_criteo)
  foreach(np 1 2)
    ember_mpi_test(dist.train.${backend}.bad_input.np${np} ${np} test_train --backend ${backend} --case bad_input)
  endforeach()
endforeach()

ember_unit_test(dlrm_output ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_output.c)
target_link_libraries(test_dlrm_output PRIVATE ember_dlrm_support)

