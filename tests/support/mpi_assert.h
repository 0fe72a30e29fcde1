// Collective assertions for MPI tests: every rank contributes its local verdict, the verdicts
// are combined (logical AND over ranks), and every rank asserts the combined value, so a failing
// rank never leaves the others waiting in the next collective.
#ifndef EMBER_TEST_MPI_ASSERT_H
#define EMBER_TEST_MPI_ASSERT_H

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>

// Returns true on every rank iff `ok` is true on every rank; prints the failing ranks' note.
bool ember_test_all_ok(MPI_Comm comm, bool ok, const char *what, const char *file, int line);

#define MPI_ASSERT_TRUE(comm, cond)                                                 \
    assert_true(ember_test_all_ok((comm), (cond), #cond, __FILE__, __LINE__))

#endif
