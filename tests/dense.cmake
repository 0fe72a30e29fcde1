# Dense products (include/ember/dense.h). unit.dense: every shape family against the naive
# oracle bit for bit, under each kernel variant the host runs (one context per variant) and 1 to
# 4 threads; refusals, allocation failure, leaks.
ember_unit_test(dense ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dense.c)
set_tests_properties(unit.dense PROPERTIES PROCESSORS 2)
