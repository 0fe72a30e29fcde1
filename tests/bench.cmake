# Smoke tests of the benchmarks (label "bench"): every `ember bench tbe` case once at a tiny
# size, checking correctness only (the exit status reports whether the residual against the
# naive reference is within tolerance). Timing never lives in ctest: `ember bench tbe` measures.
ember_test_exe(tbe_bench_smoke ${CMAKE_CURRENT_SOURCE_DIR}/bench/tbe_bench_smoke.c)
target_link_libraries(tbe_bench_smoke PRIVATE ember_bench)

set(EMBER_BENCH_OPS fwd train_sgd train_rowwise_adagrad train_adam step_sgd step_rowwise_adagrad step_adam)
foreach(op ${EMBER_BENCH_OPS})
  foreach(dtype fp32 bf16 fp16)
    foreach(dist uniform zipf)
      # Both poolings and 1 and 2 threads in each test.
      add_test(NAME bench.tbe.${op}.${dtype}.${dist}
               COMMAND tbe_bench_smoke --quick --json --ops ${op} --dtype ${dtype} --dist ${dist}
                       --threads 1,2 --iters 1 --warmup 0)
      # PROCESSORS 2: ctest -j does not stack two 2-thread runs on the same cores.
      set_tests_properties(bench.tbe.${op}.${dtype}.${dist} PROPERTIES TIMEOUT 120 LABELS bench PROCESSORS 2)
    endforeach()
  endforeach()
endforeach()
# Wider rows than --quick's D=32 (register blocks plus a remainder block) under each kernel
# variant: bench.tbe.isa.* in tests/isa.cmake.

# `ember bench shard` once at a tiny size per world size: every scheme runs a step and its
# forward matches the unsharded collection (exit status), bytes are reported per scheme.
foreach(np 1 2 3)
  ember_mpi_test(bench.shard.np${np} ${np} ember_cli bench shard --quick)
  set_tests_properties(bench.shard.np${np} PROPERTIES LABELS "bench;mpi")
endforeach()
# `ember bench ckpt` once at a tiny size: save, loads from the page cache and the disk, a
# resharding load; the exit status checks the sampled rows and steps after every load.
foreach(np 1 2)
  ember_mpi_test(bench.ckpt.np${np} ${np} ember_cli bench ckpt --quick)
  set_tests_properties(bench.ckpt.np${np} PROPERTIES LABELS "bench;mpi")
endforeach()
# `ember bench dense` once at a tiny size (batch 64, one round): every product of both presets
# through ember and OpenBLAS; the exit status checks every residual against the fp32 bound.
add_test(NAME bench.dense.quick COMMAND ember_cli bench dense --quick --json)
add_test(NAME bench.dense.quick.generic COMMAND ember_cli bench dense --quick --json --preset dlrm --isa generic)
set_tests_properties(bench.dense.quick bench.dense.quick.generic PROPERTIES TIMEOUT 300 LABELS bench PROCESSORS 2)
