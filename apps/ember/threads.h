// threads.h — how many threads each rank of `ember train` runs, and on which CPUs.
//
// The launcher decides where a rank may run before the program starts, without knowing its
// thread count: Open MPI's mpiexec binds every rank to one core when it starts at most 2 ranks
// (to a socket or NUMA node beyond), so `mpiexec -n 1 ember train --threads 2` ran both threads
// on one core, and `mpiexec -n 2 ember train --threads 8` on a 16-core host ran 16 threads on 2
// cores. Where threads float freely instead (mpiexec --bind-to none), OpenMP's workers, which
// spin between parallel regions, meet each other and the other ranks on the same cores.
//
// threads_setup therefore gives each rank of a host its own CPUs, one per thread, and pins each
// OpenMP thread to one of them, before the first parallel region:
//   - a rank keeps the CPUs the launcher gave it and grows from there: CPUs no other thread of
//     the host has, on the same package, on cores none of whose hardware threads is taken yet
//     (SMT siblings last), nearest first; ranks take turns, so their shares come out balanced;
//   - ranks that the launcher gave the same CPUs (--bind-to none, or two ranks bound to one
//     socket) start from evenly spaced CPUs of that set, so their shares do not interleave;
//   - when the host has fewer CPUs than the ranks' threads, CPUs are shared (each rank may run
//     anywhere in its share) and no thread is pinned: pinned spinning threads on shared CPUs
//     wait for each other's time slices.
// The threads' count, unless --threads gives it: OMP_NUM_THREADS when set, else the host's CPUs
// divided among its ranks, at least 1 (the CPUs: those the ranks may run on, and no more than a
// cgroup's CPU quota allows: a container limited to 2 CPUs' worth of time on a 32-CPU host has 2).
// When a host's ranks run more threads in all than it has CPUs, its first rank warns once.
// Setting OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY leaves the placement to OpenMP and the
// launcher untouched.
#ifndef EMBER_APP_THREADS_H
#define EMBER_APP_THREADS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "ember/comm.h"

// One CPU of the host, as the kernel numbers it, with its package (socket) and core: hardware
// threads of one core share (package, core).
typedef struct threads_cpu {
    int32_t id, package, core;
} threads_cpu;

// Chooses CPUs for the threads of the `nranks` ranks of one host (pure: the same inputs give the
// same choice on every rank). cpus[n]: the host's usable CPUs in ascending id; allowed[r*n + i]:
// whether the launcher let rank r run on cpus[i]; want[r]: rank r's threads. Writes rank r's
// choice, want[r] indices into cpus, at pick + (want[0] + ... + want[r-1]). Returns the most
// threads that landed on one CPU: 1 when every thread has a CPU of its own.
int32_t threads_assign(int32_t n, const threads_cpu *cpus, int32_t nranks, const uint8_t *allowed,
                       const int32_t *want, int32_t *pick);

// Parses a kernel CPU list ("0-3,8,10-11") into ids[cap] in ascending order; returns the count,
// or -1 when the text is not a list or holds more than cap CPUs.
int32_t threads_parse_cpu_list(const char *text, int32_t *ids, int32_t cap);

// Writes ids[n] (ascending) as a CPU list ("0-3,8") into buf[cap].
void threads_format_cpu_list(const int32_t *ids, int32_t n, char *buf, size_t cap);

// A cgroup's CPU bandwidth limit from "QUOTA PERIOD" (cgroup v2's cpu.max, or v1's
// cpu.cfs_quota_us and cpu.cfs_period_us joined by a space): the CPUs' worth of time it allows,
// rounded up, at least 1; 0 for no limit ("max", "-1") or text that is not such a pair.
int32_t threads_parse_cpu_limit(const char *text);

// The default threads per rank for `nranks` ranks on a host of `cpus` CPUs whose cgroup allows
// `limit` CPUs' worth of time (0: no limit): the usable CPUs divided among the ranks, at least 1.
// *cores gets the usable CPUs: min(cpus, limit).
int32_t threads_default_count(int32_t cpus, int32_t limit, int32_t nranks, int32_t *cores);

// When the `nranks` ranks of a host run `threads` threads in all on `cores` usable CPUs and
// threads > cores, writes one line into buf[cap] saying so and what to do (fewer threads per
// rank, or fewer ranks on the host) and returns true; else returns false with buf "".
bool threads_oversubscribed(int32_t nranks, int32_t threads, int32_t per_rank, int32_t cores, char *buf,
                            size_t cap);

// Called before MPI_Init with the subcommand's arguments ("train", options) and --threads
// (0: not given). For a rank of several threads, starts the program again (exec, same process)
// so that OpenMP, which fixes its waiting policy from the environment and CPU mask it finds when
// it loads, finds the host's CPUs in the mask when the launcher bound the rank to fewer CPUs than
// its threads (threads_setup narrows the mask again) and a spin of about half a millisecond
// before a waiting worker sleeps (GOMP_SPINCOUNT=20000) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT
// is set. Returns when it does not (or cannot) restart. The user's OpenMP placement variables
// switch it off, as above.
void threads_reexec(int argc, char **argv, int32_t requested);

typedef struct threads_report {
    int32_t threads;   // per rank (this rank's)
    bool pinned;       // each thread on a CPU of its own
    char text[256];    // one line for the run's configuration report (rank 0's view)
    char warning[320]; // threads_oversubscribed's line for this rank's host, or ""
    bool host_first;   // this rank is the first of its host (the one that prints the warning)
    char loader_cpus[128]; // where this rank's data loader threads should run (loader.h), as a CPU
                           // list: the host's CPUs no rank's thread is pinned to, or when every
                           // one is, this rank's own; "" when the threads are not pinned (the
                           // loaders run where the main thread may)
    bool loader_shares_cpu;  // pinned, and every CPU of the host has a rank's thread: a loader
                             // would take turns with its own rank's threads
} threads_report;

// Chooses this rank's thread count (requested > 0: that many), places the threads of every rank
// of each host as described above, and sets OpenMP's default team size and ctx's thread count
// to it. Must run before the process's first OpenMP parallel region. Failing to move a thread
// (a container that forbids it) is reported in the text, not an error.
// Collective on world. Returns EMBER_OK, EMBER_ERR_COMM, EMBER_ERR_NOMEM.
ember_status threads_setup(ember_ctx *ctx, MPI_Comm world, int32_t requested, threads_report *report);

// EMBER_OK, or EMBER_ERR_COMM recorded on ctx as "<what>: MPI error: <MPI's error string>" for
// the app's own MPI calls (those outside the library's communicator).
ember_status app_mpi_status(ember_ctx *ctx, int rc, const char *what);

// The start of a subcommand that runs under MPI (train, eval): threads_reexec, MPI_Init, a
// context of `requested` kernel threads (agreed across ranks before anything collective),
// threads_setup, then the world communicator; *note gets the placement's text. The first rank
// of a host whose threads outnumber its CPUs prints the warning to stderr, once ("ember CMD:
// warning: ...", CMD = argv[0]). The communicator gets timeout_s as its collective deadline
// (ember_comm_set_timeout). *ctx and *comm are NULL where not created. Collective over the
// launch; every rank returns the same status.
ember_status threads_start_mpi(int argc, char **argv, int32_t requested, double timeout_s, ember_ctx **ctx,
                               ember_comm **comm, threads_report *placement);
// The end of it: rank 0 prints "ember CMD: error: MESSAGE" when st failed; destroys comm and
// ctx; returns the exit code (0 or 1). main's exit path (cli_exit) then meets the other ranks and
// finalises MPI, so rank 0's error is written before any rank exits. After EMBER_ERR_TIMEOUT (a
// rank missed the collective watchdog's deadline) there is no meeting: every rank that timed out
// prints its message and exits 1 without finalising; the launcher then ends the job.
int threads_finish_mpi(const char *cmd, ember_status st, ember_ctx *ctx, ember_comm *comm);

#endif
