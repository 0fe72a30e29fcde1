# DLRM app (apps/ember): dense part, data sets, metrics, training driver and CLI.
# The oracle lives in support/dlrm/ (its own library: it implements the app's backend seam).
add_library(ember_dlrm_support STATIC ${CMAKE_CURRENT_SOURCE_DIR}/support/dlrm/naive_dlrm.c)
target_include_directories(ember_dlrm_support PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support/dlrm)
target_link_libraries(ember_dlrm_support PUBLIC ember_app ember_test_support)

ember_unit_test(dlrm_dense ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_dense.c)
target_link_libraries(test_dlrm_dense PRIVATE ember_dlrm_support)

ember_unit_test(dlrm_data ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_data.c)
target_link_libraries(test_dlrm_data PRIVATE ember_dlrm_support)

# Training under MPI on the naive replicated collection (independent of the library) and on the
# library's sharded collection: the same cases for both.
ember_test_exe(test_train ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_train.c)
target_link_libraries(test_train PRIVATE ember_dlrm_support)
set(EMBER_TRAIN_BACKENDS naive sebc)
foreach(backend ${EMBER_TRAIN_BACKENDS})
  ember_mpi_test(dist.train.${backend}.model_grads.np1 1 test_train --backend ${backend} --case step_gradients)
  ember_mpi_test(dist.train.${backend}.w1_vs_w2.np2 2 test_train --backend ${backend} --case loss_curve)
  ember_mpi_test(dist.train.${backend}.grad_sum.np2 2 test_train --backend ${backend} --case grad_sum)
  ember_mpi_test(dist.train.${backend}.learns.np2 2 test_train --backend ${backend} --case learns)
  ember_mpi_test(dist.train.${backend}.criteo.np2 2 test_train --backend ${backend} --case trains_on_criteo)
  # 1, 2 and 3 threads per rank give the same loss curve and eval outputs, bit for bit.
  foreach(np 1 2)
    ember_mpi_test(dist.train.${backend}.threads.np${np} ${np} test_train --backend ${backend} --case threads)
  endforeach()
  foreach(np 1 2)
    ember_mpi_test(dist.train.${backend}.bad_input.np${np} ${np} test_train --backend ${backend} --case bad_input)
  endforeach()
  # The last partial batch, with ranks of empty shares: W = 1, 2 and 3 train and evaluate alike.
  ember_mpi_test(dist.train.${backend}.last_batch.np3 3 test_train --backend ${backend} --case last_partial_batch)
endforeach()
# Checkpoints (the sharded collection saves and loads them): train N steps uninterrupted, or K
# steps, save, and resume in a fresh run to N: the same bits at the same world size for every
# embedding optimizer (dense sgd, adagrad, adam in turn), and within fp32 round-off when the
# checkpoint of 2 ranks is resumed by 1 and by 3.
foreach(np 1 2)
  ember_mpi_test(dist.train.sebc.resume.np${np} ${np} test_train --backend sebc --case resume_is_exact)
endforeach()
ember_mpi_test(dist.train.sebc.resume_world.np3 3 test_train --backend sebc --case resume_under_another_world_size)
# ember train --overlap on and off: the same bits.
foreach(np 1 2 3)
  ember_mpi_test(dist.train.sebc.overlap.np${np} ${np} test_train --backend sebc --case overlap)
endforeach()
# The data loader (--prefetch_batches): a source's batches, errors and messages through it are the
# inline ones, a failed start or a stop leaves no thread; ember train with it and without gives the
# same bits (synthetic, Criteo with malformed lines skipped, resumed, evaluations between steps)
# and, on a fatal malformed line, the same message on every rank.
foreach(np 1 2)
  ember_mpi_test(dist.train.sebc.loader.np${np} ${np} test_train --backend sebc --case loader)
  ember_mpi_test(dist.train.sebc.prefetch.np${np} ${np} test_train --backend sebc --case prefetch)
endforeach()

ember_unit_test(dlrm_output ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_output.c)
target_link_libraries(test_dlrm_output PRIVATE ember_dlrm_support)

# trainer.json: every option of ember train recorded or declared free to change on resume, every
# field read back, older checkpoints read with the defaults of the fields added since, a resume
# refusing each changed model or data field by name.
ember_unit_test(dlrm_trainstate ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_trainstate.c)
target_link_libraries(test_dlrm_trainstate PRIVATE ember_app)

# The CLI (build/bin/ember): help, and bad input failing on every rank with one line from rank 0
# and a non-zero exit, before any training collective.
#   ember_cli_test(NAME NP STATUS REGEX COUNT ARGS...)  NP 0: without mpiexec; see dist/expect.sh
function(ember_cli_test name np status regex count)
  if(np EQUAL 0)
    set(launch $<TARGET_FILE:ember_cli>)
  else()
    set(launch ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:ember_cli>)
  endif()
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/expect.sh ${status} ${regex} ${count} --
           ${launch} ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS "dist;cli" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                       ENVIRONMENT "${EMBER_MPI_ENV}")
  if(np GREATER 0)
    # Under mpiexec: label mpi too, so the MPICH pass (preset mpich) runs it.
    set_tests_properties(${name} PROPERTIES PROCESSORS ${np} LABELS "dist;cli;mpi")
    add_dependencies(ember_mpi_tests ember_cli)
  endif()
endfunction()

# `ember --version` names the MPI library it runs on: the one the build was configured with.
if(EMBER_MPI_FAMILY STREQUAL "Open MPI")
  set(_mpi_library "Open MPI")
elseif(EMBER_MPI_FAMILY STREQUAL "MPICH")
  set(_mpi_library "(MPICH|Intel\\(R\\) MPI|MVAPICH)")
else()
  set(_mpi_library ".")
endif()
ember_cli_test(cli.version.np1 1 0 "^mpi: .*${_mpi_library}" 1 --version)

ember_cli_test(dist.train.cli.help 0 0 "^  --num_embeddings_per_feature L" 1 train --help)
ember_cli_test(dist.train.cli.commands 0 0 "^  train +train DLRM" 1 --help)
ember_cli_test(dist.train.cli.unknown_command 0 2 "^ember: unknown command 'trian'" 1 trian)
ember_cli_test(dist.train.cli.unknown_flag.np2 2 nonzero "^ember train: unknown option '--bogus'" 1 train --bogus)
ember_cli_test(dist.train.cli.bad_value.np2 2 nonzero "^ember train: --batch_size 'many': not an integer" 1
               train --batch_size many)
ember_cli_test(dist.train.cli.bad_list.np2 2 nonzero "--num_embeddings_per_feature: 3 values given, expected 1" 1
               train --num_embeddings_per_feature 10,20,30)
ember_cli_test(dist.train.cli.bad_shape.np2 2 nonzero
               "^ember train: error: --dense_arch_layer_sizes ends with 8 but --embedding_dim is 16" 1
               train --dense_arch_layer_sizes 64,8)
ember_cli_test(dist.train.cli.too_big.np2 2 nonzero "^ember train: error: the model needs .* GiB is available" 1
               train --num_embeddings 100000000000000)
ember_cli_test(dist.train.cli.batch_below_world.np2 2 nonzero "^ember train: error: --batch_size 1 is smaller than the 2 ranks" 1
               train --batch_size 1)
ember_cli_test(dist.train.cli.missing_file.np2 2 nonzero "^ember train: error: .*cannot open 'nonexistent.tsv'" 1
               train --dataset criteo --data_path nonexistent.tsv)
ember_cli_test(dist.train.cli.bad_metrics.np2 2 nonzero "^ember train: error: --metrics 'run.txt'" 1
               train --metrics run.txt)
# A short synthetic run end to end: configuration, evaluations, report, metrics and plot.
ember_cli_test(dist.train.cli.synthetic.np2 2 0
               "^(eval AUC [0-9.]+ +planted model AUC|plot: cli.png$|digest: losses [0-9a-f]{16} outputs [0-9a-f]{16} dense [0-9a-f]{16} tables [0-9a-f]{16}$)" 3
               train --batch_size 1024 --limit_train_batches 60 --limit_val_batches 4 --eval_interval 20
               --metrics cli.csv --plot cli.png --progress lines --digest)

# Data that cannot train: empty, every line malformed, binary, a .npy array, an eval file of
# nothing, a file held out whole; each one error line naming the file and what it held, the
# same on every rank, and a non-zero exit, for `ember train` and `ember eval` (3 ranks).
add_test(NAME dist.train.cli.no_usable_data.np3
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_data.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.no_usable_data.np3 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 3
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# The .npy header parser: what numpy writes is read, the rest refused with a reason.
ember_unit_test(dlrm_npy ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_npy.c)
target_link_libraries(test_dlrm_npy PRIVATE ember_app)
# TorchRec's Criteo day files (--dataset criteo_npy): the same data as day files and as TSV trains
# the same model bit for bit, 1 to 3 ranks alike; unreadable files are one error line naming them.
ember_test_exe(npy_days ${CMAKE_CURRENT_SOURCE_DIR}/dist/npy_days.c)
target_link_libraries(npy_days PRIVATE ember_app m)
add_dependencies(ember_mpi_tests npy_days) # the MPICH pass builds only what its tests run
add_test(NAME dist.train.cli.criteo_npy
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_npy.sh $<TARGET_FILE:ember_cli> $<TARGET_FILE:npy_days>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.criteo_npy PROPERTIES TIMEOUT 600 LABELS "dist;cli;mpi" PROCESSORS 3
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# An option of the other data set is a usage error naming it, in either direction and order.
ember_cli_test(dist.train.cli.data_path_without_criteo 0 2
               "^ember train: --data_path is an option of --dataset criteo, but the dataset is synthetic \\(the default\\), which ignores it: add --dataset criteo" 1
               train --data_path train.tsv)
ember_cli_test(dist.train.cli.eval_data_path_synthetic 0 2
               "^ember train: --eval_data_path is an option of --dataset criteo, but the dataset is synthetic, which" 1
               train --eval_data_path eval.tsv --dataset synthetic)
ember_cli_test(dist.train.cli.malformed_synthetic 0 2 "^ember train: --malformed is an option of --dataset criteo" 1
               train --malformed fatal)
ember_cli_test(dist.train.cli.zipf_alpha_criteo 0 2
               "^ember train: --zipf_alpha is an option of --dataset synthetic .*, but the dataset is criteo, which ignores it" 1
               train --zipf_alpha 1.1 --dataset criteo --data_path train.tsv)
ember_cli_test(dist.train.cli.data_path_without_criteo.np2 2 nonzero "^ember train: --data_path is an option of --dataset criteo" 1
               train --data_path train.tsv --batch_size 64)

# Output: a redirected log (under mpiexec or not) holds plain lines, never the progress bar's
# carriage returns; a terminal gets the bar; more threads than CPUs on a host: one warning.
add_test(NAME dist.train.cli.output.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_output.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.output.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")

# Threads: --threads 2 on one rank, placed on CPUs of their own (or sharing them, on a 1-CPU
# host), trains and says so.
ember_cli_test(dist.train.cli.threads.np1 1 0 "^(  threads     2 per rank \\(--threads\\), |eval AUC [0-9.]+ +planted)" 2
               train --threads 2 --batch_size 512 --limit_train_batches 10 --limit_val_batches 2 --progress lines)

# The library's planner places the tables (--sharding auto, the default, or its synonym plan);
# mixing it into a list is refused.
ember_cli_test(dist.train.cli.planner.np2 2 0 "^eval AUC [0-9.]+ +planted model AUC" 1
               train --sharding plan --batch_size 512 --limit_train_batches 20 --limit_val_batches 2
               --eval_interval 20 --progress lines)
set(_list plan)
foreach(i RANGE 1 25)
  string(APPEND _list ",dp")
endforeach()
ember_cli_test(dist.train.cli.planner_in_list.np2 2 nonzero "^ember train: --sharding plan places every table" 1
               train --sharding ${_list})
string(REPLACE "plan," "auto," _list "${_list}")
ember_cli_test(dist.train.cli.auto_in_list.np2 2 nonzero "^ember train: --sharding auto places every table" 1
               train --sharding ${_list})

# Plan files: `ember plan --output` -> `ember train --plan` round trip, a hand-written plan is
# followed table by table, and a bad plan file is one error line naming the table and value,
# a non-zero exit and no hang on any rank.
add_test(NAME dist.train.cli.plan_roundtrip.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/plan_roundtrip.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.plan_roundtrip.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# Checkpoints from the command line: `train --save_dir` killed after its first checkpoint,
# `train --resume` ends with the uninterrupted run's digest, `ckpt info --verify`, `eval --load`,
# and a resume with another model refused in one line.
add_test(NAME dist.train.cli.resume_kill.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/resume_kill.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.resume_kill.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# Incremental checkpoints from the command line (dist/train_delta.sh): deltas every N steps go
# into the newest full checkpoint of the run, the chain verifies and `ckpt info` names it, a run
# resumed from a chain ends with the uninterrupted run's digest.
add_test(NAME dist.train.cli.delta.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_delta.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.delta.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# A real full disk under `train --save_dir` (a 22 MiB tmpfs; skipped with the reason where
# mounting one is not allowed): a failed save leaves no step directory it made, keeps the
# committed one it would have replaced, and the save directory verifies and resumes.
add_test(NAME dist.train.cli.save_disk_full.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_tmpfs.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.save_disk_full.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${EMBER_MPI_ENV}")
# Serving bundles (dist/export.sh): `ember export` by 1 and 2 ranks gives the same bundle, `eval
# --load BUNDLE` the same outputs at 1 and 2 ranks and the checkpoint's AUC within 0.005 (int8),
# pruning and per-table types, and bad input refused in one line.
add_test(NAME dist.train.cli.export.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/export.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.export.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
ember_cli_test(cli.export.help 0 0 "^  --quantize SPEC " 1 export --help)
ember_cli_test(cli.export.no_output 0 2 "^ember export: --output DIR \\(where the bundle goes\\) is required" 1
               export --load x)
# `ember serve` (dist/serve.sh, dist/serve_load.py): a bundle served under 8 concurrent loopback
# clients answers every eval sample with ember eval's probability to the bit; malformed,
# oversized, out-of-range and abandoned requests are refused alone; SIGTERM under load ends it
# cleanly; 2 ranks, a bad host and a busy port are refused in one line.
add_test(NAME dist.serve.load
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/serve.sh $<TARGET_FILE:ember_cli> /usr/bin/python3
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.serve.load PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
if(TARGET ember_serve) # EMBER_SERVE=OFF builds run no test that needs it (the device check)
  add_dependencies(ember_mpi_tests ember_serve) # `ember serve` execs build/bin/ember-serve
endif()
ember_cli_test(cli.serve.help 0 0 "^  POST /predict " 1 serve --help)
ember_cli_test(cli.serve.no_load 0 2 "^ember serve: --load DIR is required" 1 serve)
# trainer.json damaged (another format) or a dense blob missing, the CRC-32s recomputed so that
# the checkpoint opens (dist/ckpt_blob.py): ckpt info, eval --load and train --resume each say so
# in one line, quoting the format and naming their own flag.
add_test(NAME dist.train.cli.trainer_json.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/ckpt_trainer.sh $<TARGET_FILE:ember_cli> /usr/bin/python3
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.trainer_json.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# What trainer.json records: eval --load of a default, a collisionless and a tiered run prints the
# run's last evaluation; a resume with another --hash_policy, --hash_ttl, --synth_items or --hash
# is refused by name; a checkpoint without those fields (an older ember's) loads and resumes.
add_test(NAME dist.train.cli.ckpt_config.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/ckpt_config.sh $<TARGET_FILE:ember_cli> /usr/bin/python3
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.ckpt_config.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# --prefetch_batches 0 and 2 from the command line: the same digest (synthetic; Criteo with
# malformed lines skipped, the same report of them), the same single error line for a fatal one in
# a later batch, the data wait in the report, and an interrupted job that ends (1 and 2 ranks).
foreach(np 1 2)
  add_test(NAME dist.train.cli.prefetch.np${np}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_prefetch.sh $<TARGET_FILE:ember_cli>
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS})
  set_tests_properties(dist.train.cli.prefetch.np${np} PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS ${np}
                       ENVIRONMENT "${EMBER_MPI_ENV}")
endforeach()
# --num_generated_batches N: batches 0..N-1 generated before training and cycled (the digests of
# the equivalent runs without it, resumed, with and without the loader), a resume with another N
# refused (2 ranks).
add_test(NAME dist.train.cli.generated.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_generated.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.generated.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
ember_cli_test(dist.train.cli.generated_criteo 0 2
               "^ember train: --num_generated_batches is an option of --dataset synthetic" 1
               train --dataset criteo --data_path x.tsv --num_generated_batches 3)
ember_cli_test(dist.train.cli.resume_missing.np2 2 nonzero
               "^ember train: error: --resume 'nonexistent': cannot open it: No such file or directory" 1
               train --resume nonexistent)
ember_cli_test(dist.train.cli.interval_without_dir 0 2
               "^ember train: --checkpoint_interval saves checkpoints: give --save_dir DIR" 1
               train --checkpoint_interval 10)
ember_cli_test(cli.eval.help 0 0 "^  --load DIR " 1 eval --help)
ember_cli_test(cli.eval.no_load 0 2 "^ember eval: --load DIR is required" 1 eval)
ember_cli_test(cli.ckpt.help 0 0 "^usage: ember ckpt info \\[--verify\\] DIR" 1 ckpt --help)
ember_cli_test(cli.ckpt.missing 0 1 "^ember ckpt info: error: checkpoint 'nonexistent': cannot open it" 1
               ckpt info nonexistent)
set(_plans ${CMAKE_CURRENT_SOURCE_DIR}/data/plans)
set(_short --batch_size 512 --limit_train_batches 2 --limit_val_batches 1 --eval_interval 0 --progress lines)
ember_cli_test(dist.train.cli.plan_file.np2 2 0 "^    t_cat_[0-9]+ +[0-9]+ rows  tw   rank 1$" 26
               train ${_short} --plan ${_plans}/all_tw_rank1.json)
# --rebalance_every from a plan that puts every table on rank 1: the first re-plan moves the tables
# (the planner's plan for the measured speeds halves the slowest rank's load), later ones may keep
# them; the run trains on to its evaluation.
ember_cli_test(dist.train.cli.rebalance.np2 2 0
               "^(rebalance   step 10: rank speeds [0-9.]+ [0-9.]+. slowest rank's predicted load .*: moved the tables \\([0-9.]+ MB between ranks, [0-9.]+ s\\)|eval AUC [0-9.]+ +planted)" 2
               train --batch_size 512 --limit_train_batches 20 --limit_val_batches 2 --eval_interval 0
               --plan ${_plans}/all_tw_rank1.json --rebalance_every 10)
ember_cli_test(dist.train.cli.plan_and_sharding.np2 2 nonzero "^ember train: --sharding and --plan both place" 1
               train --sharding rw --plan ${_plans}/all_tw_rank1.json)
ember_cli_test(dist.train.cli.plan_missing.np2 2 nonzero "^ember train: error: --plan: cannot open 'nonexistent.json'" 1
               train ${_short} --plan nonexistent.json)
ember_cli_test(dist.train.cli.plan_not_json.np2 2 nonzero "^ember train: error: --plan '.*bad_json.json': not valid JSON" 1
               train ${_short} --plan ${_plans}/bad_json.json)
ember_cli_test(dist.train.cli.plan_world.np3 3 nonzero
               "^ember train: error: --plan '.*': world_size 2, but this run has 3 ranks" 1
               train ${_short} --plan ${_plans}/all_tw_rank1.json)
ember_cli_test(dist.train.cli.plan_count.np2 2 nonzero "^ember train: error: --plan '.*': 3 tables, the model has 26" 1
               train ${_short} --plan ${_plans}/bad_count.json)
ember_cli_test(dist.train.cli.plan_name.np2 2 nonzero
               "^ember train: error: --plan '.*': table 't_cat_99' is not a table of the model \\(t_cat_0 to t_cat_25\\)" 1
               train ${_short} --plan ${_plans}/bad_name.json)
ember_cli_test(dist.train.cli.plan_twice.np2 2 nonzero "^ember train: error: --plan '.*': table 't_cat_3' is listed twice" 1
               train ${_short} --plan ${_plans}/bad_twice.json)
ember_cli_test(dist.train.cli.plan_rank.np2 2 nonzero
               "^ember train: error: --plan '.*': table 't_cat_7': rank 5 is not one of the 2 ranks of this run" 1
               train ${_short} --plan ${_plans}/bad_rank.json)
# A shard count beyond every integer (JSON's 1e999 is an infinity; fuzz_planfile found its
# conversion to int undefined): refused as not an integer.
ember_cli_test(dist.train.cli.plan_shards_inf.np2 2 nonzero
               "^ember train: error: --plan '.*': table 't_cat_0': shards and group must be integers" 1
               train ${_short} --plan ${_plans}/bad_shards_inf.json)
ember_cli_test(dist.train.cli.plan_scheme.np2 2 nonzero
               "^ember train: error: --plan '.*': table 't_cat_2': scheme 'diagonal' is not one of" 1
               train ${_short} --plan ${_plans}/bad_scheme.json)

# --embedding_optimizer takes every optimizer of the library (ember_optim_parse), the newest too,
# and an unknown name lists them all.
foreach(opt partial_rowwise_lamb lars_sgd)
  ember_cli_test(dist.train.cli.optimizer_${opt}.np2 2 0
                 "^(  optimizers  dense adagrad lr 0.05, embeddings ${opt} lr 0.05|eval AUC [0-9.]+ +planted)" 2
                 train --embedding_optimizer ${opt} --batch_size 512 --limit_train_batches 4 --limit_val_batches 1
                 --eval_interval 0 --progress lines)
endforeach()
ember_cli_test(dist.train.cli.optimizer_unknown.np2 2 nonzero
               "^ember train: --embedding_optimizer 'x': expected one of sgd, .*, partial_rowwise_lamb, lars_sgd " 1
               train --embedding_optimizer x)
ember_cli_test(dist.train.cli.optimizer_help 0 0 "\\|partial_rowwise_lamb\\|lars_sgd$" 1 train --help)

# Every error is printed once, by rank 0, and before any rank exits (cli_exit): a launcher that
# ends the job at the first non-zero exit (Open MPI 5) must not cut rank 0's line. Usage errors
# of main and of a subcommand, and an error agreed during training, at 2 and 3 ranks.
foreach(np 2 3)
  ember_cli_test(dist.cli.unknown_command.np${np} ${np} nonzero "^ember: unknown command 'trian'" 1 trian)
  ember_cli_test(dist.train.cli.missing_value.np${np} ${np} nonzero "^ember train: --batch_size needs a value" 1
                 train --batch_size)
endforeach()
ember_cli_test(dist.train.cli.unknown_flag.np3 3 nonzero "^ember train: unknown option '--bogus'" 1 train --bogus)
ember_cli_test(dist.train.cli.batch_below_world.np3 3 nonzero
               "^ember train: error: --batch_size 2 is smaller than the 3 ranks" 1 train --batch_size 2)

# `ember plan`: the planner from the command line (no MPI).
ember_cli_test(cli.plan.tables 0 0 "^t_cat_[0-4] (data_parallel|table_wise|row_wise|column_wise)" 5
               plan --num_embeddings_per_feature 1000,20000,100000,50000,4000000 --world_size 3 --adagrad)
ember_cli_test(cli.plan.no_room 0 1 "^ember plan: .*'t_cat_0'.* fits on no rank" 1
               plan --num_embeddings_per_feature 100000000 --world_size 2 --memory_per_rank 1000000)
ember_cli_test(cli.plan.bad_flag 0 2 "^ember plan: unknown option '--bogus'" 1 plan --bogus)
ember_cli_test(cli.plan.bad_optimizer 0 2 "^ember plan: --embedding_optimizer 'x': expected one of sgd, .*lars_sgd$" 1
               plan --embedding_optimizer x)

# Thread placement of `ember train` (apps/ember/threads.h) on made-up hosts.
ember_unit_test(dlrm_threads ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dlrm_threads.c)
target_link_libraries(test_dlrm_threads PRIVATE ember_dlrm_support)

# bench/train_grid.sh once at a tiny size: every configuration of a 2-core grid (and the
# oversubscribed row) trains, one JSON line each and the table. Timing stays out of ctest.
add_test(NAME bench.train_grid.smoke
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/expect.sh 0 "^(\\{\"ranks\":[0-9]| *ranks +threads +cores)" 5 --
                 env EMBER_BIN=$<TARGET_FILE:ember_cli> bash ${PROJECT_SOURCE_DIR}/bench/train_grid.sh
                 --cores 2 --rounds 1 --steps 2 -- --batch_size 256 --limit_val_batches 1)
set_tests_properties(bench.train_grid.smoke PROPERTIES TIMEOUT 300 LABELS "bench;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")

# A rank stopped (SIGSTOP) mid-training: the others stop at the collective watchdog's deadline
# (--timeout_s 4) naming it, and the job exits non-zero within the deadline plus a slack.
add_test(NAME dist.train.cli.stall.np3
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_stall.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.stall.np3 PROPERTIES TIMEOUT 120 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")

# Tables on disk and collisionless hashed tables from the command line (docs/tiered.md,
# docs/hashed.md): the same digest as in RAM, a resumed collisionless run equal to an
# uninterrupted one, and flags that do not fit together refused in one line.
add_test(NAME dist.train.cli.big_tables.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_big_tables.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.big_tables.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# Tiered tables that fit a small disk start there: the disk probe's file is sized to their files
# (a 40 MiB tmpfs, skipped where none can be mounted), and --disk_gbps skips it.
add_test(NAME dist.train.cli.probe_small_disk.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_probe_tmpfs.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.probe_small_disk.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${EMBER_MPI_ENV}")
ember_cli_test(cli.train.ssd_without_cache 0 2 "^ember train: --ssd_tables puts tables on disk behind a DRAM cache" 1
               train --ssd_tables all)
ember_cli_test(cli.train.ssd_bad_table 0 2 "^ember train: --ssd_tables 't_cat_30': not a table" 1
               train --ssd_tables 3,t_cat_30 --cache_rows 10)
ember_cli_test(cli.train.ssd_and_collisionless 0 2 "^ember train: --ssd_tables and --hash collisionless" 1
               train --ssd_tables 1 --cache_rows 10 --hash collisionless)
# --preset mlperf_dcnv2 sets MLPerf's DLRM-DCNv2 (its model and multi-hot sizes); an option given,
# before or after it, overrides it (the row caps here, to fit the test machine); another name is
# refused listing the presets; multi-hot bags cannot draw from hashed tables.
ember_cli_test(cli.train.preset_mlperf 0 0
               "^(  model       dense arch 13-512-256-128, dcn interaction 3456 wide \\(3 cross layers of rank 512\\), over arch 3456-1024-1024-512-256-1: 16044545 dense|  multi-hot   ids per sample 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1:|  optimizers  dense adagrad lr 0.004, embeddings rowwise_adagrad lr 0.004|done: 2 steps)" 4
               train --num_embeddings 1000 --preset mlperf_dcnv2 --batch_size 64 --limit_train_batches 2
               --limit_val_batches 1 --threads 1 --progress lines)
ember_cli_test(cli.train.preset_unknown 0 2 "^ember train: --preset 'mlperf': expected one of none, mlperf_dcnv2" 1
               train --preset mlperf)
ember_cli_test(cli.train.multi_hot_collisionless 0 nonzero "--multi_hot_sizes draws its extra ids from each table's rows. --hash collisionless tables" 1
               train --multi_hot_sizes 2 --hash collisionless --limit_train_batches 1)
# Options of collisionless hashing with --hash modulo, and --hash_ttl without --hash_policy ttl,
# are refused saying why; a bucket of one row is refused at parse time; a hashed table's rows are
# listed as built (64 rounded up to whole buckets of 3: 66).
ember_cli_test(cli.train.hash_policy_modulo 0 2
               "^ember train: --hash_policy is an option of --hash collisionless, but hashing is modulo \\(the default\\), which ignores it" 1
               train --hash_policy lfu)
ember_cli_test(cli.train.hash_min_count_modulo 0 2
               "^ember train: --hash_min_count is an option of --hash collisionless, but hashing is modulo, which" 1
               train --hash modulo --hash_min_count 2)
ember_cli_test(cli.train.hash_bucket_rows_modulo 0 2 "^ember train: --hash_bucket_rows is an option of --hash collisionless" 1
               train --hash_bucket_rows 4)
ember_cli_test(cli.train.hash_ttl_lru 0 2
               "^ember train: --hash_ttl is the time to live of --hash_policy ttl, but the policy is lru \\(the default\\), which ignores it" 1
               train --hash collisionless --hash_ttl 5)
ember_cli_test(cli.train.hash_ttl_lfu 0 2 "^ember train: --hash_ttl is the time to live of --hash_policy ttl, but the policy is lfu," 1
               train --hash collisionless --hash_ttl 5 --hash_policy lfu)
ember_cli_test(cli.train.hash_bucket_rows_one 0 2 "^ember train: --hash_bucket_rows 1: expected 2\\.\\.1048576" 1
               train --hash collisionless --hash_bucket_rows 1)
ember_cli_test(dist.train.cli.hash_rows_built.np1 1 0 "^(    t_cat_[0-9]+ +66 rows |  tables      26 x dim 16, 1716 rows)" 27
               train --hash collisionless --hash_bucket_rows 3 --num_embeddings 64 --batch_size 64
               --limit_train_batches 1 --limit_val_batches 1 --eval_interval 0 --progress lines)
ember_cli_test(cli.train.bad_hash 0 2 "^ember train: --hash 'cuckoo': expected one of modulo, collisionless" 1
               train --hash cuckoo)
ember_cli_test(dist.train.cli.cache_too_small.np2 2 nonzero "^ember train: error: table 't_cat_.*': this batch touches [0-9]+ distinct rows, its cache holds 8 \\(raise cache_rows\\)" 1
               train --ssd_tables all --cache_rows 8 --batch_size 256 --limit_train_batches 2 --limit_val_batches 1)
# The same bits on every host (docs/dlrm.md): the three stored digest runs of
# data/train_digests.txt under every kernel variant the host runs, and with 2 threads per rank.
add_test(NAME dist.train.cli.digests
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_digests.sh $<TARGET_FILE:ember_cli>
                 ${CMAKE_CURRENT_SOURCE_DIR}/data/train_digests.txt ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG}
                 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.digests PROPERTIES TIMEOUT 600 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# --dedup_features on requests of candidates sharing a user's features: the run reports its
# deduplication and ends where the run without it does, up to summation order (one-hot and
# multi-hot, overlapped or not); bad lists are refused.
add_test(NAME dist.train.cli.dedup.np2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_dedup.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.dedup.np2 PROPERTIES TIMEOUT 300 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
# --sharding_group_size (2D): the run says so and ends where one group ends up to summation order;
# its checkpoint resumes under another group size; bad sizes and options refused.
add_test(NAME dist.train.cli.2d.np4
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_2d.sh $<TARGET_FILE:ember_cli>
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 ${MPIEXEC_PREFLAGS})
set_tests_properties(dist.train.cli.2d.np4 PROPERTIES TIMEOUT 600 LABELS "dist;cli;mpi" PROCESSORS 2
                     ENVIRONMENT "${EMBER_MPI_ENV}")
add_dependencies(ember_mpi_tests ember_cli)
