ember_unit_test(tiered ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_tiered.c)
