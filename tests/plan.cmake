ember_unit_test(plan ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan.c)
