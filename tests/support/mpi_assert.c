#include "mpi_assert.h"

bool ember_test_all_ok(MPI_Comm comm, bool ok, const char *what, const char *file, int line) {
    int local = ok ? 1 : 0, all = 0, rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (!ok) fprintf(stderr, "rank %d: assertion failed: %s at %s:%d\n", rank, what, file, line);
    MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_LAND, comm);
    return all != 0;
}
