# Quantized inference tables (include/ember/quant.h). unit.quant: rows byte for byte and within
# each format's bound, the pooled forward against the naive oracle and bit for bit under each
# kernel variant the host runs and 1 to 4 threads, pruning, bounds, refusals, allocation failures.
ember_unit_test(quant ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_quant.c)
set_tests_properties(unit.quant PROPERTIES PROCESSORS 2)
