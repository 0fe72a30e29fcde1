# LFQ tests (docs/lfq.md): golden files in float64 and float32, behaviour and bad input, and the
# distributed checks under mpiexec.
# support/lfq_golden.c is globbed into ember_test_support like every support file, but only the
# LFQ executables link cJSON: the support library just needs the header path for that file.
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/support/lfq_golden.c PROPERTIES
                            INCLUDE_DIRECTORIES "${CJSON_INCLUDE_DIRS}")

# Every *.json in $EMBER_LFQ_GOLDEN_DIR, default tests/data/lfq ($EMBER_TEST_DATA/lfq).
ember_unit_test(lfq_golden ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lfq_golden.c)
# Finite differences against the naive oracle (support/lfq_oracle.c), masks, state, bad input.
ember_unit_test(lfq ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lfq.c)
foreach(t test_lfq_golden test_lfq)
  target_link_libraries(${t} PRIVATE PkgConfig::CJSON)
endforeach()

# Data parallelism: each rank a slice of the golden batch, the oracle with unequal slices, and
# collective failure on bad input.
ember_test_exe(test_lfq_dist ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_lfq.c)
target_link_libraries(test_lfq_dist PRIVATE PkgConfig::CJSON)
foreach(np 2 4)
  ember_mpi_test(dist.lfq.np${np} ${np} test_lfq_dist)
endforeach()
