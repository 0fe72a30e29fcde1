ember_unit_test(core ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_core.c)
ember_test_exe(test_comm ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_comm.c)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.comm.np${np} ${np} test_comm)
endforeach()
ember_unit_test(names ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_names.c)
# Every collective of the public headers agrees on the arguments every rank must give alike (a
# collective without its row in the test's table fails it).
ember_test_exe(test_collective_args ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_collective_args.c)
foreach(np 1 2 3)
  ember_mpi_test(dist.collective_args.np${np} ${np} test_collective_args --include ${PROJECT_SOURCE_DIR}/include/ember)
endforeach()
