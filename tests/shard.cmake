# Distributed equals single-process, per scheme x pooling, under mpiexec with 1-4 ranks.
ember_test_exe(test_shard ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_shard.c)
foreach(np 1 2 3 4)
  foreach(scheme dp tw cw rw twrw mixed)
    foreach(pool sum mean)
      ember_mpi_test(dist.${scheme}.${pool}.np${np} ${np} test_shard --scheme ${scheme} --pool ${pool})
    endforeach()
  endforeach()
  foreach(scheme dp tw rw twrw)
    ember_mpi_test(dist.${scheme}.none.np${np} ${np} test_shard --scheme ${scheme} --pool none)
  endforeach()
endforeach()
# Grid: column slices, each row-wise over a group of 2 ranks (two shards on one rank included).
foreach(np 2 3 4)
  foreach(pool sum mean)
    ember_mpi_test(dist.grid.${pool}.np${np} ${np} test_shard --scheme grid --pool ${pool})
  endforeach()
endforeach()
ember_mpi_test(dist.grid.mean.extra_opts.np3 3 test_shard --scheme grid --pool mean --extra-opts)
# The other optimizers (Adagrad, partial row-wise Adam, LAMB, partial row-wise LAMB, LARS-SGD) on
# every scheme, 3 ranks.
foreach(scheme dp tw cw rw twrw mixed)
  ember_mpi_test(dist.${scheme}.mean.extra_opts.np3 3 test_shard --scheme ${scheme} --pool mean --extra-opts)
endforeach()

# Plans made by the planner are valid and train like the single process.
foreach(np 2 3)
  ember_mpi_test(dist.planned.mean.np${np} ${np} test_shard --scheme planned --pool mean)
endforeach()

# Checkpoint under one plan, load under another (and another world size's shards), train on.
foreach(np 1 2 3)
  foreach(scheme tw rw mixed)
    ember_mpi_test(dist.checkpoint.reshard.${scheme}.np${np} ${np} test_shard --scheme ${scheme} --pool mean --reshard)
  endforeach()
endforeach()

# A rank with an empty local batch still takes part in every collective.
ember_mpi_test(dist.mixed.sum.empty_rank.np3 3 test_shard --scheme mixed --pool sum --empty0)
ember_mpi_test(dist.rw.none.empty_rank.np2 2 test_shard --scheme rw --pool none --empty0)

# Named regression scenarios and error agreement.
ember_test_exe(test_shard_seed ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_shard_seed.c)
foreach(np 2 4)
  foreach(scheme dp tw cw rw twrw)
    ember_mpi_test(dist.seed.rw_grad_not_scaled.${scheme}.np${np} ${np} test_shard_seed rw_grad_not_scaled --scheme ${scheme})
  endforeach()
endforeach()
foreach(np 1 3 4)
  ember_mpi_test(dist.seed.rw_mean_global_length.np${np} ${np} test_shard_seed rw_mean_global_length --scheme rw)
endforeach()
ember_mpi_test(dist.seed.rw_mean_global_length.twrw.np3 3 test_shard_seed rw_mean_global_length --scheme twrw)
foreach(np 1 2 3)
  ember_mpi_test(dist.bytes.np${np} ${np} test_shard_seed bytes_match_analytic_count)
  # MEAN divides by the id count in every scheme, weighted or not (TorchRec's row-wise divides
  # weighted bags by the weight sum); W = 3 splits the 10 rows unevenly.
  ember_mpi_test(dist.seed.mean_divisor_id_count.np${np} ${np} test_shard_seed mean_divisor_id_count)
endforeach()
# bf16 conversion of a data-parallel table: the state dict, the next forward and the next step
# all use the converted storage (TorchRec's next forward reads the old one).
foreach(np 1 2 3 4)
  ember_mpi_test(dist.seed.dp_dtype_conversion.np${np} ${np} test_shard_seed dp_dtype_conversion)
endforeach()
foreach(np 1 2 3 4)
  ember_mpi_test(dist.bucketize.ids_examined.np${np} ${np} test_shard_seed bucketize_examines_each_id_once)
endforeach()
foreach(np 2 4)
  ember_mpi_test(dist.seed.rw_grad_not_scaled.grid.np${np} ${np} test_shard_seed rw_grad_not_scaled --scheme grid)
endforeach()
foreach(np 2 3)
  ember_mpi_test(dist.errors.grid_bad_plan.np${np} ${np} test_shard_seed grid_bad_plan)
  ember_mpi_test(dist.errors.bad_rank.np${np} ${np} test_shard_seed bad_rank)
endforeach()

# Checkpoints (tests/dist/test_ckpt.c): resharding into every world size up to W under other
# plans, bounded memory, the commit protocol's failures, blobs, clean-up of killed saves, and
# damaged manifests that verify refuses exactly as a load does.
ember_test_exe(test_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_ckpt.c)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.checkpoint.np${np} ${np} test_ckpt)
endforeach()

# Crash-safe saves: a rank SIGKILLed at random moments of a save, 20 times; the checkpoint at the
# path always loads whole (under 1 and 2 ranks) and never goes back to an older one.
ember_test_exe(ckpt_saver dist/ckpt_saver.c)
add_dependencies(ember_mpi_tests ckpt_saver)
add_test(NAME dist.checkpoint.kill_loop.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/ckpt_kill.sh $<TARGET_FILE:ckpt_saver> 20 2
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.checkpoint.kill_loop.np2 PROPERTIES TIMEOUT 600 LABELS "dist;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# A real full disk (a 32 MiB tmpfs; skipped with the reason where mounting one is not allowed).
add_test(NAME dist.checkpoint.tmpfs_full.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/ckpt_tmpfs.sh $<TARGET_FILE:ckpt_saver> 2
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.checkpoint.tmpfs_full.np2 PROPERTIES TIMEOUT 300 LABELS "dist;mpi" PROCESSORS 2
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${EMBER_MPI_ENV}")

# Checkpoints readable outside ember: a checkpoint of every dtype, optimizer-state shape and
# scheme (64-byte records, two blobs) read back with the Python standard library and numpy alone
# (tests/python/read_checkpoint.py: CRC-32 of every record, each element covered exactly once,
# steps, blobs) and compared bitwise with the gathered state dict. Debian's interpreter, where
# apt's python3-numpy lives (scripts/setup.sh); without numpy the test fails, naming the fix.
ember_test_exe(ckpt_dump dist/ckpt_dump.c)
add_dependencies(ember_mpi_tests ckpt_dump)
foreach(np 2 3)
  add_test(NAME dist.checkpoint.numpy_reader.np${np}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/ckpt_numpy.sh $<TARGET_FILE:ckpt_dump>
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/read_checkpoint.py /usr/bin/python3 ${np}
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${MPIEXEC_PREFLAGS})
  set_tests_properties(dist.checkpoint.numpy_reader.np${np} PROPERTIES TIMEOUT 300 LABELS "dist;mpi"
                       PROCESSORS ${np} ENVIRONMENT "${EMBER_MPI_ENV}")
endforeach()

# Ranks that disagree (tests/dist/test_agreement.c): configuration fingerprints, the backward's KJT,
# non-finite per-id weights.
ember_test_exe(test_agreement ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_agreement.c)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.agreement.np${np} ${np} test_agreement)
endforeach()

# The pipelined step (prefetch, backward start/finish) equals the plain step bitwise; a prefetch
# one rank's forward does not repeat, and a bad KJT after a prefetch, agreed on without a hang.
ember_test_exe(test_overlap ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_overlap.c)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.overlap.np${np} ${np} test_overlap)
endforeach()

# Resharding a running collection (ember_sebc_reshard): every tensor, then the next step, bitwise
# a collection created with the new plan and loaded from a checkpoint of the old; refusals
# change nothing.
ember_test_exe(test_reshard ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_reshard.c)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.reshard.np${np} ${np} test_reshard)
endforeach()

# 2D parallelism (ember_sebc_create_2d): tables sharded within groups of G ranks, replicated over
# the W / G groups. Equal to one process on the global batch, replicas bitwise equal (test_shard
# compares every rank's gathered tables), at 1 to 4 ranks (3 groups of one at W = 3); checkpoints
# from 2D into one group and back; the pipelined step bitwise the plain one (a prefetch only one
# group drops); refusals and a bad batch in one group, agreed on by every rank.
foreach(np 1 2 3 4)
  ember_mpi_test(dist.2d.mixed.mean.g1.np${np} ${np} test_shard --scheme mixed --pool mean --group 1)
endforeach()
ember_mpi_test(dist.2d.mixed.sum.g2.np4 4 test_shard --scheme mixed --pool sum --group 2)
ember_mpi_test(dist.2d.mixed.mean.g2.np4 4 test_shard --scheme mixed --pool mean --group 2)
foreach(scheme dp twrw grid)
  ember_mpi_test(dist.2d.${scheme}.mean.g2.np4 4 test_shard --scheme ${scheme} --pool mean --group 2)
endforeach()
foreach(scheme cw grid)
  ember_mpi_test(dist.2d.${scheme}.mean.extra_opts.g2.np4 4
                 test_shard --scheme ${scheme} --pool mean --extra-opts --group 2)
endforeach()
ember_mpi_test(dist.2d.rw.none.g2.np4 4 test_shard --scheme rw --pool none --group 2)
ember_mpi_test(dist.2d.mixed.sum.empty_rank.g2.np4 4 test_shard --scheme mixed --pool sum --empty0 --group 2)
ember_mpi_test(dist.2d.checkpoint.into_1d.np4 4
               test_shard --scheme mixed --pool mean --reshard --group 2 --group-after 0)
ember_mpi_test(dist.2d.checkpoint.from_1d.np4 4 test_shard --scheme mixed --pool mean --reshard --group-after 2)
ember_mpi_test(dist.2d.checkpoint.g1.np3 3 test_shard --scheme mixed --pool mean --reshard --group 1)
ember_mpi_test(dist.2d.overlap.g1.np2 2 test_overlap --group 1)
ember_mpi_test(dist.2d.overlap.g2.np4 4 test_overlap --group 2)
foreach(np 2 4)
  ember_mpi_test(dist.2d.errors.np${np} ${np} test_shard_seed two_d_errors)
endforeach()
