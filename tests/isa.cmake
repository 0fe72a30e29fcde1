# Kernel variants (include/ember/core.h, ember_isa).
# unit.isa: every variant the host runs against generic, bit for bit (and the AVX-512 variant's
# code emulated by SIMDe where the host lacks AVX-512 but SIMDe's headers are installed).
ember_unit_test(isa ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_isa.c)
find_path(SIMDE_INCLUDE_DIR simde/x86/avx512.h)
if(SIMDE_INCLUDE_DIR AND "avx2" IN_LIST EMBER_ISA_VARIANTS)
  set(_emu ${CMAKE_CURRENT_SOURCE_DIR}/support/isa/avx512_emulated.c)
  target_sources(test_isa PRIVATE ${_emu})
  # -Wno-psabi: the emulated 512-bit vectors pass between this file's static functions only, so
  # the ABI clang warns about never crosses a call it does not compile itself.
  set_source_files_properties(${_emu} PROPERTIES COMPILE_OPTIONS "${EMBER_ISA_FLAGS_avx2};-ffp-contract=off;-fno-math-errno;-Wno-psabi"
                              INCLUDE_DIRECTORIES ${SIMDE_INCLUDE_DIR})
  target_compile_definitions(test_isa PRIVATE EMBER_TEST_AVX512_EMULATED=1)
else()
  message(STATUS "unit.isa: no SIMDe headers (libsimde-dev): the AVX-512 variant is tested only on AVX-512 hosts")
endif()

# The kernel/optimizer/dtype matrix against the naive oracle, and the benchmark's kernels and
# limit loops, forced through each variant in turn (EMBER_ISA); a variant the host lacks is
# skipped with its reason (exit 77).
foreach(isa generic avx2 avx512)
  add_test(NAME unit.ebc.isa.${isa} COMMAND test_ebc)
  set_tests_properties(unit.ebc.isa.${isa} PROPERTIES TIMEOUT 300 LABELS "unit;isa" SKIP_RETURN_CODE 77
                       ENVIRONMENT "EMBER_ISA=${isa}")
  add_test(NAME bench.tbe.isa.${isa} COMMAND tbe_bench_smoke --quick --json --shape 3,300,160,9,7
           --dtype fp32,bf16,fp16 --threads 1,2 --iters 1 --warmup 0)
  set_tests_properties(bench.tbe.isa.${isa} PROPERTIES TIMEOUT 300 LABELS "bench;isa" PROCESSORS 2
                       SKIP_RETURN_CODE 77 ENVIRONMENT "EMBER_ISA=${isa}")
endforeach()

if(EMBER_WITH_CUDA) # the device-memory calls' case allocates device buffers itself
  target_compile_definitions(test_isa PRIVATE EMBER_TEST_CUDA=1)
  target_link_libraries(test_isa PRIVATE CUDA::cudart_static)
endif()
# The cuda backend (src/tbe/cuda/, docs/cuda.md) against the cpu backend, bit for bit, on the same
# matrix, and run to run; skipped with the reason (exit 77) without the backend or a GPU.
add_test(NAME unit.backend.cuda COMMAND test_isa)
set_tests_properties(unit.backend.cuda PROPERTIES TIMEOUT 600 LABELS "unit;cuda" SKIP_RETURN_CODE 77
                     ENVIRONMENT "EMBER_TEST_BACKEND=cuda")
