# Wire precision (tests/dist/test_wire.c): fp16/bf16/fp8/int8 pooled outputs and gradients within
# their bounds of the fp32 path for every scheme (row-block partial sums included), with loss
# scales, explicit fp32 bitwise the default, a short training run, ranks that disagree, overflow.
ember_test_exe(test_wire ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_wire.c)
foreach(np 2 3 4)
  foreach(scheme tw cw rw twrw grid dp)
    ember_mpi_test(dist.wire.bound.${scheme}.sum.np${np} ${np} test_wire bound --scheme ${scheme} --pool sum)
  endforeach()
endforeach()
# One process: nothing crosses ranks, so fp16/bf16 give fp32's bits (and bytes).
foreach(scheme tw rw)
  ember_mpi_test(dist.wire.bound.${scheme}.sum.np1 1 test_wire bound --scheme ${scheme} --pool sum)
endforeach()
foreach(scheme tw rw twrw grid cw)
  ember_mpi_test(dist.wire.bound.${scheme}.mean.np3 3 test_wire bound --scheme ${scheme} --pool mean)
  ember_mpi_test(dist.wire.train.${scheme}.mean.np2 2 test_wire train --scheme ${scheme} --pool mean)
endforeach()
foreach(scheme tw rw twrw)
  ember_mpi_test(dist.wire.bound.${scheme}.none.np3 3 test_wire bound --scheme ${scheme} --pool none)
endforeach()
ember_mpi_test(dist.wire.train.rw.sum.np4 4 test_wire train --scheme rw --pool sum)
foreach(np 2 3)
  ember_mpi_test(dist.wire.disagree.np${np} ${np} test_wire disagree)
  ember_mpi_test(dist.wire.overflow.np${np} ${np} test_wire overflow)
  ember_mpi_test(dist.wire.overflow8.np${np} ${np} test_wire overflow8)
endforeach()
# `ember bench shard --wire_precision`: every scheme runs a step with encoded pooled outputs and
# gradients, its forward within the encoding's bound of the unsharded collection (exit status).
ember_mpi_test(bench.shard.wire.fp16.np2 2 ember_cli bench shard --quick --wire_precision fp16)
ember_mpi_test(bench.shard.wire.bf16_fp32.np3 3 ember_cli bench shard --quick --wire_precision bf16,fp32)
ember_mpi_test(bench.shard.wire.int8.np2 2 ember_cli bench shard --quick --wire_precision int8)
ember_mpi_test(bench.shard.wire.fp8.np3 3 ember_cli bench shard --quick --wire_precision fp8_e4m3,fp8_e5m2
               --wire_loss_scale 2,1024)
set_tests_properties(bench.shard.wire.fp16.np2 bench.shard.wire.bf16_fp32.np3 bench.shard.wire.int8.np2
                     bench.shard.wire.fp8.np3 PROPERTIES LABELS "bench;mpi")
# `ember train --wire_precision`: trains with fp16 pooled outputs and bf16 gradients and says so,
# and with int8 pooled outputs and fp8 gradients under a loss scale; values outside the wire's
# dtypes, and loss scales that are not positive numbers, are refused.
ember_cli_test(dist.train.cli.wire_precision.np2 2 0
               "^(  wire        pooled outputs fp16, their gradients bf16 between ranks|eval AUC [0-9.]+ +planted)" 2
               train --sharding rw --wire_precision fp16,bf16 --batch_size 512 --limit_train_batches 10
               --limit_val_batches 2)
ember_cli_test(dist.train.cli.wire_precision_8bit.np2 2 0
               "^(  wire        pooled outputs int8, their gradients fp8_e5m2 between ranks \\(loss scales 1, 4096\\)|eval AUC [0-9.]+ +planted)" 2
               train --sharding rw --wire_precision int8,fp8_e5m2 --wire_loss_scale 1,4096 --batch_size 512
               --limit_train_batches 10 --limit_val_batches 2)
ember_cli_test(dist.train.cli.wire_precision_bad 0 2
               "^ember train: --wire_precision 'fp8': expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 or int8" 1
               train --wire_precision fp8)
ember_cli_test(dist.train.cli.wire_loss_scale_bad 0 2
               "^ember train: --wire_loss_scale '1,0': expected a number > 0, or two comma-separated" 1
               train --wire_loss_scale 1,0)
