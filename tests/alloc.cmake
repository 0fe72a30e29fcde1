# Allocation-failure injection (support/fail_alloc.h): every public call sequence with its k-th
# allocation failing, for every k; NOMEM on every rank, nothing changed, nothing leaked.
ember_unit_test(alloc_fail ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_alloc_fail.c)
