# Allocation-failure injection (support/fail_alloc.h): every public call sequence with its k-th
# allocation failing, for every k; NOMEM on every rank, nothing changed, nothing leaked.
ember_unit_test(alloc_fail ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_alloc_fail.c)
# The collective sequences with the failure on one rank at a time (each rank in turn); one test
# per group of sequences under 2 and 3 ranks, so that each takes a few seconds.
ember_test_exe(test_alloc_fail_dist ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_alloc_fail.c)
ember_mpi_test(dist.alloc_fail.np1 1 test_alloc_fail_dist)
foreach(np 2 3)
  foreach(part comm_create sebc_create sebc_forward sebc_backward sebc_state checkpoint lfq)
    ember_mpi_test(dist.alloc_fail.${part}.np${np} ${np} test_alloc_fail_dist ${part})
  endforeach()
endforeach()
