ember_unit_test(ebc ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ebc.c)
