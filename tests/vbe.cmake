# Variable batch size per feature (tests/dist/test_vbe.c): the unsharded collection against the
# oracle on the expanded batch; the sharded one, every scheme at 1 to 4 ranks, equal to one
# process on the expanded global batch, pipelined and across a checkpoint into another plan;
# bad VBE input on one rank fails every rank and changes nothing.
ember_test_exe(test_vbe ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_vbe.c)
ember_mpi_test(dist.vbe.local.np1 1 test_vbe local)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.vbe.train.mixed.np${np} ${np} test_vbe train --scheme mixed)
endforeach()
foreach(scheme grid dp)
  ember_mpi_test(dist.vbe.train.${scheme}.np3 3 test_vbe train --scheme ${scheme})
endforeach()
ember_mpi_test(dist.vbe.pipelined.mixed.np3 3 test_vbe train --scheme mixed --pipelined)
ember_mpi_test(dist.vbe.pipelined.grid.np2 2 test_vbe train --scheme grid --pipelined)
ember_mpi_test(dist.vbe.ckpt.mixed.np2 2 test_vbe train --scheme mixed --ckpt)
foreach(np 2 3)
  ember_mpi_test(dist.vbe.errors.np${np} ${np} test_vbe errors)
endforeach()
