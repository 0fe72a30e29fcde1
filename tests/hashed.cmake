ember_unit_test(hashed ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_hashed.c)
