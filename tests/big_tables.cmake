# Tiered and hashed tables sharded over 1-4 ranks equal one process on the whole batch.
ember_test_exe(test_big_tables ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_big_tables.c)
foreach(np 1 2 3 4)
  foreach(scheme tw cw rw twrw grid dp)
    ember_mpi_test(dist.big_tables.${scheme}.np${np} ${np} test_big_tables --scheme ${scheme})
  endforeach()
endforeach()

# Every hashed and tiered parameter at its edges (and past them) under every scheme, with ids of
# both spaces in the same messages: equal to one process, or refused alike on every rank.
ember_test_exe(test_id_space ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_id_space.c)
foreach(np 1 2 3)
  ember_mpi_test(dist.id_space.np${np} ${np} test_id_space)
endforeach()
