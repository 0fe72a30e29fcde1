// Threads per rank and their CPUs (see threads.h).
#define _GNU_SOURCE // sched_getaffinity, pthread_setaffinity_np
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "appctx.h"
#include "threads.h"

// ---- Choosing CPUs (pure) ----------------------------------------------------------------------

// Whether candidate a is a better next CPU than b for a rank: least used first, then one of the
// rank's own part, one the launcher allowed, on its anchor's package, on a core with no hardware
// thread taken yet (else one of the rank's own cores), nearest to the anchor (above it first),
// lowest index.
typedef struct candidate {
    int32_t claims, outside_part, outside_mask, other_package, core_taken, core_of_other, distance, index;
} candidate;

static bool better(const candidate *a, const candidate *b) {
    const int32_t ka[] = {a->claims,     a->outside_part,  a->outside_mask, a->other_package,
                          a->core_taken, a->core_of_other, a->distance,     a->index};
    const int32_t kb[] = {b->claims,     b->outside_part,  b->outside_mask, b->other_package,
                          b->core_taken, b->core_of_other, b->distance,     b->index};
    for (size_t i = 0; i < sizeof ka / sizeof ka[0]; i++) {
        if (ka[i] != kb[i]) return ka[i] < kb[i];
    }
    return false;
}

// Whether CPU index a comes before b in core order: by package, then core, then index (a core's
// hardware threads together), so that runs of that order hold whole cores.
static bool core_order(const threads_cpu *cpus, int32_t a, int32_t b) {
    if (cpus[a].package != cpus[b].package) return cpus[a].package < cpus[b].package;
    if (cpus[a].core != cpus[b].core) return cpus[a].core < cpus[b].core;
    return a < b;
}

int32_t threads_assign(int32_t n, const threads_cpu *cpus, int32_t nranks, const uint8_t *allowed,
                       const int32_t *want, int32_t *pick) {
    if (n <= 0 || nranks <= 0) return 0;
    int32_t *claims = calloc((size_t)n, sizeof *claims);
    int32_t *core_owner = malloc(sizeof(int32_t) * (size_t)n); // the rank that took the core first
    int32_t *core_of = malloc(sizeof(int32_t) * (size_t)n), *anchor = malloc(sizeof(int32_t) * (size_t)nranks);
    int32_t *got = calloc((size_t)nranks, sizeof *got), *first = malloc(sizeof(int32_t) * (size_t)nranks);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
    uint8_t *pref = calloc((size_t)nranks * (size_t)n, 1);
    int32_t most = 0;
    if (!claims || !core_owner || !core_of || !anchor || !got || !first || !order || !pref) goto done;
    // Hardware threads of one core share its first CPU's index.
    for (int32_t i = 0; i < n; i++) {
        core_owner[i] = -1;
        core_of[i] = i;
        order[i] = i;
        for (int32_t j = 0; j < i; j++) {
            if (cpus[j].package == cpus[i].package && cpus[j].core == cpus[i].core) {
                core_of[i] = j;
                break;
            }
        }
    }
    for (int32_t i = 1; i < n; i++) { // insertion sort: a host has at most CPU_SETSIZE CPUs
        for (int32_t j = i; j > 0 && core_order(cpus, order[j], order[j - 1]); j--) {
            const int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    }
    // Each rank's own part: when m ranks got the same CPUs from the launcher, the k-th of them
    // prefers the k-th of m runs of those CPUs in core order; a rank the launcher gave CPUs of
    // its own prefers all of them. Its anchor is the first CPU of its part.
    int64_t total = 0;
    for (int32_t r = 0; r < nranks; r++) {
        first[r] = (int32_t)total;
        total += want[r] > 0 ? want[r] : 0;
        const uint8_t *mine = allowed + (size_t)r * (size_t)n;
        int32_t k = 0, m = 0, size = 0;
        for (int32_t q = 0; q < nranks; q++) {
            if (memcmp(mine, allowed + (size_t)q * (size_t)n, (size_t)n) != 0) continue;
            if (q < r) k++;
            m++;
        }
        for (int32_t i = 0; i < n; i++) size += mine[i] != 0;
        const int64_t lo = (int64_t)k * size / m, hi = (int64_t)(k + 1) * size / m;
        anchor[r] = -1;
        for (int32_t j = 0, seen = 0; j < n; j++) {
            const int32_t i = order[j];
            if (!mine[i]) continue;
            if (seen >= lo && seen < hi) {
                pref[(size_t)r * (size_t)n + (size_t)i] = 1;
                if (anchor[r] < 0) anchor[r] = i;
            }
            seen++;
        }
        if (anchor[r] < 0) anchor[r] = order[0];
    }
    // Ranks take turns, one CPU each, until every thread has one.
    for (bool more = true; more;) {
        more = false;
        for (int32_t r = 0; r < nranks; r++) {
            if (got[r] >= want[r]) continue;
            const uint8_t *mine = allowed + (size_t)r * (size_t)n, *own = pref + (size_t)r * (size_t)n;
            int32_t *chosen = pick + first[r];
            candidate best = {0};
            int32_t best_i = -1;
            for (int32_t i = 0; i < n; i++) {
                // A CPU twice for one rank only once the rank holds every CPU.
                bool held = false;
                for (int32_t j = 0; j < got[r] && !held; j++) held = chosen[j] == i;
                if (held && got[r] < n) continue;
                const int32_t d = i - anchor[r];
                const int32_t owner = core_owner[core_of[i]];
                candidate c = {claims[i],
                               own[i] ? 0 : 1,
                               mine[i] ? 0 : 1,
                               cpus[i].package != cpus[anchor[r]].package ? 1 : 0,
                               owner >= 0 ? 1 : 0,
                               owner >= 0 && owner != r ? 1 : 0,
                               d < 0 ? -2 * d + 1 : 2 * d,
                               i};
                if (best_i < 0 || better(&c, &best)) {
                    best = c;
                    best_i = i;
                }
            }
            chosen[got[r]++] = best_i;
            claims[best_i]++;
            if (core_owner[core_of[best_i]] < 0) core_owner[core_of[best_i]] = r;
            if (claims[best_i] > most) most = claims[best_i];
            if (got[r] < want[r]) more = true;
        }
    }
done:
    free(claims);
    free(core_owner);
    free(core_of);
    free(anchor);
    free(got);
    free(first);
    free(order);
    free(pref);
    return most;
}

int32_t threads_parse_cpu_list(const char *text, int32_t *ids, int32_t cap) {
    int32_t n = 0;
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\n' || *p == '\0') return 0;
    for (;;) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0) return -1;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a) return -1;
            p = end;
        }
        for (long i = a; i <= b; i++) {
            if (n == cap || i > INT32_MAX || (n > 0 && i <= ids[n - 1])) return -1;
            ids[n++] = (int32_t)i;
        }
        if (*p != ',') break;
        p++;
    }
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    return *p == '\0' ? n : -1;
}

void threads_format_cpu_list(const int32_t *ids, int32_t n, char *buf, size_t cap) {
    size_t len = 0;
    if (cap == 0) return;
    buf[0] = '\0';
    for (int32_t i = 0; i < n;) {
        int32_t j = i;
        while (j + 1 < n && ids[j + 1] == ids[j] + 1) j++;
        int w = j > i ? snprintf(buf + len, cap - len, "%s%d-%d", i ? "," : "", (int)ids[i], (int)ids[j])
                      : snprintf(buf + len, cap - len, "%s%d", i ? "," : "", (int)ids[i]);
        if (w < 0 || (size_t)w >= cap - len) return; // truncated, still terminated
        len += (size_t)w;
        i = j + 1;
    }
}

int32_t threads_parse_cpu_limit(const char *text) {
    char quota[32], rest[2];
    long long period = 0;
    if (sscanf(text, "%31s %lld %1s", quota, &period, rest) != 2 || period <= 0) return 0;
    if (strcmp(quota, "max") == 0) return 0;
    char *end;
    long long q = strtoll(quota, &end, 10);
    if (*end != '\0' || q <= 0) return 0; // -1: no limit
    long long cpus = (q + period - 1) / period;
    return cpus > CPU_SETSIZE ? CPU_SETSIZE : (int32_t)cpus;
}

int32_t threads_default_count(int32_t cpus, int32_t limit, int32_t nranks, int32_t *cores) {
    int32_t c = limit > 0 && limit < cpus ? limit : cpus;
    if (c < 1) c = 1;
    *cores = c;
    const int32_t share = nranks > 0 ? c / nranks : c;
    return share > 0 ? share : 1;
}

bool threads_oversubscribed(int32_t nranks, int32_t threads, int32_t per_rank, int32_t cores, char *buf,
                            size_t cap) {
    if (cap) buf[0] = '\0';
    if (threads <= cores || cores < 1 || nranks < 1) return false;
    char count[96], fix[192];
    if (per_rank > 0) {
        snprintf(count, sizeof count, "%d rank%s x %d thread%s", (int)nranks, nranks > 1 ? "s" : "", (int)per_rank,
                 per_rank > 1 ? "s" : "");
    } else {
        snprintf(count, sizeof count, "%d rank%s with %d threads in all", (int)nranks, nranks > 1 ? "s" : "",
                 (int)threads);
    }
    if (nranks <= cores) {
        const int32_t fit = cores / nranks;
        snprintf(fix, sizeof fix, "give each rank at most %d thread%s (--threads %d)", (int)fit, fit > 1 ? "s" : "",
                 (int)fit);
    } else {
        snprintf(fix, sizeof fix, "start at most %d rank%s on this host (mpiexec -n %d, or more hosts), one thread each",
                 (int)cores, cores > 1 ? "s" : "", (int)cores);
    }
    snprintf(buf, cap,
             "%s on this host's %d CPU%s: they take turns on the CPUs and every step waits for the rank "
             "descheduled last (with several threads per rank, often several times slower); %s",
             count, (int)cores, cores > 1 ? "s" : "", fix);
    return true;
}

// ---- The host --------------------------------------------------------------------------------

// Reads a whole small file into buf; false if it cannot.
static bool read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

// The CPUs this process's cgroup may use (cgroup v2, then v1's cpuset controller), else every
// online CPU. The launcher's binding narrows a process's own mask, not its cgroup: this is the
// set it may widen to.
static void host_cpus(cpu_set_t *set) {
    char text[8192], path[512], line[512];
    int32_t ids[CPU_SETSIZE];
    int32_t n = -1;
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f && n < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        // "id:controllers:path"; v2 has id 0 and no controllers, v1 names cpuset among them.
        char *controllers = strchr(line, ':'), *rel = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!rel) continue;
        *rel++ = '\0';
        controllers++;
        const char *dir = strcmp(rel, "/") == 0 ? "" : rel;
        bool v1 = false;
        for (char *c = strtok(controllers, ","); c && !v1; c = strtok(NULL, ",")) v1 = strcmp(c, "cpuset") == 0;
        int w = -1;
        if (strcmp(line, "0") == 0 && *controllers == '\0') {
            w = snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpuset.cpus.effective", dir);
        } else if (v1) {
            w = snprintf(path, sizeof path, "/sys/fs/cgroup/cpuset%s/cpuset.effective_cpus", dir);
        }
        if (w > 0 && w < (int)sizeof path && read_text(path, text, sizeof text)) {
            n = threads_parse_cpu_list(text, ids, CPU_SETSIZE);
        }
    }
    if (f) fclose(f);
    if (n <= 0 && read_text("/sys/devices/system/cpu/online", text, sizeof text)) {
        n = threads_parse_cpu_list(text, ids, CPU_SETSIZE);
    }
    CPU_ZERO(set);
    for (int32_t i = 0; i < n; i++) CPU_SET(ids[i], set);
}

// The smallest limit (threads_parse_cpu_limit) of the cgroup directory dir and its parents up to
// root: a file name (v2's cpu.max), or two (v1's quota and period); 0 when none limits.
static int32_t limit_up_from(char *dir, size_t root, const char *file, const char *period_file) {
    int32_t limit = 0;
    for (;;) {
        char path[600], text[64], period[64], both[160];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        bool got = read_text(path, text, sizeof text);
        if (got && period_file) {
            snprintf(path, sizeof path, "%s/%s", dir, period_file);
            got = read_text(path, period, sizeof period);
            if (got) {
                text[strcspn(text, "\n")] = '\0';
                snprintf(both, sizeof both, "%s %s", text, period);
                memcpy(text, both, sizeof text - 1);
                text[sizeof text - 1] = '\0';
            }
        }
        const int32_t l = got ? threads_parse_cpu_limit(text) : 0;
        if (l > 0 && (limit == 0 || l < limit)) limit = l;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < root) return limit;
        *slash = '\0';
    }
}

// The CPUs' worth of time this process's cgroup and its parents allow (cgroup v2's cpu.max, v1's
// CFS quota), rounded up; 0 when nothing limits it. A container started with --cpus=2 on a large
// host sees every CPU in its mask and its cpuset, but gets 2 CPUs' worth of time.
static int32_t cgroup_cpu_limit(void) {
    char line[512], dir[512];
    int32_t limit = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':'), *rel = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!rel) continue;
        *rel++ = '\0';
        controllers++;
        const char *sub = strcmp(rel, "/") == 0 ? "" : rel;
        int32_t l = 0;
        if (strcmp(line, "0") == 0 && *controllers == '\0') {
            const char *base = "/sys/fs/cgroup";
            snprintf(dir, sizeof dir, "%s%s", base, sub);
            l = limit_up_from(dir, strlen(base), "cpu.max", NULL);
        } else {
            bool cpu = false;
            for (char *c = strtok(controllers, ","); c && !cpu; c = strtok(NULL, ",")) cpu = strcmp(c, "cpu") == 0;
            const char *bases[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
            for (size_t b = 0; cpu && l == 0 && b < sizeof bases / sizeof bases[0]; b++) {
                snprintf(dir, sizeof dir, "%s%s", bases[b], sub);
                l = limit_up_from(dir, strlen(bases[b]), "cpu.cfs_quota_us", "cpu.cfs_period_us");
            }
        }
        if (l > 0 && (limit == 0 || l < limit)) limit = l;
    }
    if (f) fclose(f);
    return limit;
}

// /sys/devices/system/cpu/cpuN/topology/<what>, or fallback.
static int32_t topology(int32_t cpu, const char *what, int32_t fallback) {
    char path[128], text[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", (int)cpu, what);
    return read_text(path, text, sizeof text) ? (int32_t)strtol(text, NULL, 10) : fallback;
}

static bool user_placement(void) {
    const char *vars[] = {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return true;
    }
    return false;
}

// The lowest rank of comm where ok is false, or -1 when it holds everywhere (or the reduction
// itself fails: the next collective reports that). Collective.
static int first_failure(MPI_Comm comm, bool ok) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    struct {
        int ok, rank;
    } in = {ok ? 1 : 0, rank}, out = {1, 0};
    if (MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm) != MPI_SUCCESS) return -1;
    return out.ok ? -1 : out.rank;
}

ember_status app_mpi_status(ember_ctx *ctx, int rc, const char *what) {
    if (rc == MPI_SUCCESS) return EMBER_OK;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return ember_ctx_set_error(ctx, EMBER_ERR_COMM, "%s: MPI error: %s", what, s);
}

// ---- OpenMP's view of the host ----------------------------------------------------------------

// libgomp (GCC's OpenMP) fixes two things when it is loaded, from the environment and the CPU
// mask it finds then, and neither can be changed afterwards:
//  - it lets a waiting worker spin only while its threads do not outnumber the mask's CPUs;
//    beyond, a worker sleeps after 100 spins and each parallel region first wakes it through
//    the kernel. Under mpiexec's one-core binding every thread of a multi-thread rank is "too
//    many": a region after a serial stretch cost 33-53 us instead of 1-3 us here (a virtual
//    machine), and a step has about 25 regions;
//  - otherwise a worker spins 300000 times (8 ms on this Zen 3 host) before sleeping. On CPUs
//    the rank has to itself that is harmless, but beside another busy process a spinning thread
//    burns the time slices the thread it waits for needs: with the host's second core taken by
//    a compiler, 1 rank x 2 threads ran at 23k samples/s with the default spin and 30k with
//    20000 spins (about 0.5 ms; 30k fully passive), and as fast as the default when quiet.
// So before MPI starts, a rank that runs several threads starts itself again (exec: the same
// process and arguments) with the host's CPUs in its mask when its threads outnumber the
// launcher's CPUs, and GOMP_SPINCOUNT=EMBER_SPINCOUNT unless the user chose a wait policy;
// threads_setup then narrows the mask to the rank's share, knowing the launcher's choice from
// EMBER_LAUNCHER_CPUS.
#define LAUNCHER_CPUS "EMBER_LAUNCHER_CPUS"
#define EMBER_SPINCOUNT "20000"

// Ranks of this host, from the launcher's environment: 1 without a launcher, 0 when unknown.
static int32_t launcher_local_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    const char *ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        if (getenv(ranks[i])) return 0;
    }
    return 1;
}

static bool env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

void threads_reexec(int argc, char **argv, int32_t requested) {
    if (getenv(LAUNCHER_CPUS) || user_placement()) return;
    cpu_set_t mask, host;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return;
    host_cpus(&host);
    CPU_OR(&host, &host, &mask);
    const int32_t have = CPU_COUNT(&mask), n = CPU_COUNT(&host), local = launcher_local_size();
    int32_t cores = n;
    const int32_t share = threads_default_count(n, cgroup_cpu_limit(), local > 0 ? local : 1, &cores);
    const char *env = getenv("OMP_NUM_THREADS");
    int32_t T = requested > 0 ? requested : env && atoi(env) > 0 ? atoi(env) : local > 0 ? share : 0;
    if (local <= 0 || T <= 1) return; // one thread: nothing waits; ranks unknown: nothing known
    // A wider mask when the host has a CPU for every thread of its ranks (else short spins are
    // what shared CPUs need, and the narrow mask gives them); a shorter spin unless the user
    // chose, and only where libgomp would spin at all (not with the narrow mask kept).
    const bool widen = T > have && (int64_t)T * local <= cores;
    const bool spin = !env_set("GOMP_SPINCOUNT") && !env_set("OMP_WAIT_POLICY") && (widen || T <= have);
    if (!widen && !spin) return;
    int32_t ids[CPU_SETSIZE], k = 0;
    for (int32_t c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &mask)) ids[k++] = c;
    }
    char list[1024];
    threads_format_cpu_list(ids, k, list, sizeof list);
    char **args = malloc(sizeof(char *) * ((size_t)argc + 2));
    if (!args || setenv(LAUNCHER_CPUS, list, 1) != 0 || (spin && setenv("GOMP_SPINCOUNT", EMBER_SPINCOUNT, 1) != 0)) {
        free(args);
        unsetenv(LAUNCHER_CPUS);
        return;
    }
    static char name[] = "ember";
    args[0] = name; // argv is the subcommand's: "train", its options
    for (int i = 0; i < argc; i++) args[i + 1] = argv[i];
    args[argc + 1] = NULL;
    // The program's own path, not /proc/self/exe, which would rename the process "exe".
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0 && (!widen || sched_setaffinity(0, sizeof host, &host) == 0)) {
        self[len] = '\0';
        fflush(NULL);
        execv(self, args);
        sched_setaffinity(0, sizeof mask, &mask); // exec failed: carry on as launched
    }
    unsetenv(LAUNCHER_CPUS);
    if (spin) unsetenv("GOMP_SPINCOUNT");
    free(args);
}

// What one rank tells the others of its host.
typedef struct rank_view {
    cpu_set_t mask; // where the launcher lets it run
    cpu_set_t host; // what its cgroup allows
    int32_t want;   // its threads (0: not decided: the host's share)
    int32_t user;   // 1: the user placed threads through OpenMP's variables
    int32_t limit;  // its cgroup's CPU limit (cgroup_cpu_limit), 0: none
} rank_view;

// Pins OpenMP thread i to cpus[i] for the T threads of the team every later region reuses
// (libgomp hands team member i the same pool thread while the team size does not grow).
static int pin_threads(const int32_t *cpus, int32_t T) {
    int failed = 0;
#pragma omp parallel num_threads(T) reduction(+ : failed)
    {
        int i = 0;
#ifdef _OPENMP
        i = omp_get_thread_num();
#endif
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[i], &one);
        failed += pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0;
    }
    return failed;
}

// What threads_setup learns of this rank's host, step by step.
typedef struct host_view {
    int local, nlocal;     // this rank's index among the host's ranks, and their count
    rank_view me;          // this rank's view
    bool got_mask;         // me.mask is known
    const char *how;       // what set the thread count: "--threads", "OMP_NUM_THREADS" or NULL
    rank_view *all;        // [nlocal] every rank's view
    threads_cpu *cpus;     // [n] the host's CPUs
    int32_t n;             // CPUs of the host
    int32_t user;          // 1: some rank's threads are placed by the user (or nothing is known)
    int32_t limit;         // the tightest CPU quota of the ranks' cgroups, 0: none
} host_view;

// This rank's CPU mask (the launcher's, as threads_reexec found it), its cgroup's CPUs and quota,
// and the threads it wants. Local.
static void look_at_self(host_view *h, int32_t requested) {
    rank_view *me = &h->me;
    memset(me, 0, sizeof *me);
    h->got_mask = sched_getaffinity(0, sizeof me->mask, &me->mask) == 0;
    if (!h->got_mask) CPU_ZERO(&me->mask);
    const char *launched = getenv(LAUNCHER_CPUS); // threads_reexec widened the launcher's mask
    if (launched) {
        int32_t ids[CPU_SETSIZE], k = threads_parse_cpu_list(launched, ids, CPU_SETSIZE);
        if (k > 0) {
            CPU_ZERO(&me->mask);
            for (int32_t i = 0; i < k; i++) CPU_SET(ids[i], &me->mask);
            h->got_mask = true;
        }
        unsetenv(LAUNCHER_CPUS); // not for the processes the trainer starts (gnuplot)
    }
    host_cpus(&me->host);
    const char *env = getenv("OMP_NUM_THREADS");
    h->how = requested > 0 ? "--threads" : env && *env ? "OMP_NUM_THREADS" : NULL;
#ifdef _OPENMP
    me->want = requested > 0 ? requested : h->how ? omp_get_max_threads() : 0;
#else
    me->want = 1;
#endif
    me->user = user_placement() || !h->got_mask;
    me->limit = cgroup_cpu_limit();
}

// Every rank of the host learns every rank's view (h->all), after agreeing that each could
// allocate its buffers. Collective on node.
static ember_status gather_views(ember_ctx *ctx, MPI_Comm world, MPI_Comm node, host_view *h) {
    ember_status st = EMBER_OK;
    h->all = app_alloc(ctx, sizeof *h->all * (size_t)h->nlocal, "thread placement");
    h->cpus = app_alloc(ctx, sizeof *h->cpus * CPU_SETSIZE, "thread placement");
    if (!h->all || !h->cpus) st = EMBER_ERR_NOMEM;
    const int failed = first_failure(node, st == EMBER_OK);
    if (failed >= 0) {
        // Every rank of the host reports the failing rank's reason under its rank.
        int mine = ember_ctx_rank(ctx), theirs = failed;
        MPI_Group node_group, world_group;
        MPI_Comm_group(node, &node_group);
        MPI_Comm_group(world, &world_group);
        MPI_Group_translate_ranks(node_group, 1, &failed, world_group, &theirs);
        MPI_Group_free(&node_group);
        MPI_Group_free(&world_group);
        ember_ctx_set_rank(ctx, theirs);
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "thread placement: out of memory");
        ember_ctx_set_rank(ctx, mine);
    }
    if (st == EMBER_OK) {
        st = app_mpi_status(ctx, MPI_Allgather(&h->me, (int)sizeof h->me, MPI_BYTE, h->all, (int)sizeof h->me,
                                               MPI_BYTE, node),
                            "thread placement: allgather");
    }
    return st;
}

// The host: every CPU some rank's cgroup allows or some rank runs on, and the tightest CPU
// quota of their cgroups. Local.
static void list_host_cpus(host_view *h) {
    cpu_set_t host;
    CPU_ZERO(&host);
    for (int r = 0; r < h->nlocal; r++) {
        CPU_OR(&host, &host, &h->all[r].host);
        CPU_OR(&host, &host, &h->all[r].mask);
        h->user |= h->all[r].user;
        if (h->all[r].limit > 0 && (h->limit == 0 || h->all[r].limit < h->limit)) h->limit = h->all[r].limit;
    }
    for (int32_t c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &host)) continue;
        h->cpus[h->n].id = c;
        h->cpus[h->n].package = topology(c, "physical_package_id", 0);
        h->cpus[h->n].core = topology(c, "core_id", c);
        h->n++;
    }
    if (h->n == 0) h->user = 1; // nothing known about the host: leave everything as it is
}

// Moves this rank (and, one CPU each, its T threads) to the CPUs threads_assign picks for it
// among the host's ranks, who want want[r] threads each (host_threads in all); *mine gets the
// chosen CPUs and *launcher the launcher's, as CPU lists. Local (every rank of the host computes
// the same assignment).
static ember_status place(ember_ctx *ctx, host_view *h, int32_t share, int32_t T, int32_t host_threads,
                          threads_report *report, char mine[128], char launcher[128]) {
    const int32_t n = h->n, nlocal = h->nlocal;
    ember_status st = EMBER_OK;
    int32_t most = 0;
    uint8_t *allowed = app_alloc(ctx, (size_t)nlocal * (size_t)n, "thread placement");
    int32_t *want = app_alloc(ctx, sizeof(int32_t) * (size_t)nlocal, "thread placement");
    for (int r = 0; r < nlocal && want; r++) want[r] = h->all[r].want > 0 ? h->all[r].want : share;
    int32_t *pick = want ? app_alloc(ctx, sizeof(int32_t) * (size_t)host_threads, "thread placement") : NULL;
    if (!allowed || !want || !pick) {
        st = EMBER_ERR_NOMEM;
    } else {
        for (int r = 0; r < nlocal; r++) {
            for (int32_t i = 0; i < n; i++)
                allowed[(size_t)r * (size_t)n + (size_t)i] = CPU_ISSET(h->cpus[i].id, &h->all[r].mask) != 0;
        }
        most = threads_assign(n, h->cpus, nlocal, allowed, want, pick);
    }
    if (st == EMBER_OK && most > 0) {
        int32_t off = 0, ids[CPU_SETSIZE], nid = 0, was[CPU_SETSIZE], nwas = 0;
        for (int r = 0; r < h->local; r++) off += want[r];
        int32_t *chosen = pick + off;
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int32_t t = 0; t < T; t++) {
            chosen[t] = h->cpus[chosen[t]].id;
            CPU_SET(chosen[t], &set);
        }
        // More threads than CPUs: every rank may run anywhere on the host, and the scheduler
        // balances (3 one-thread ranks on 2 CPUs each get 2/3 of a CPU, instead of two of them
        // sharing one CPU while the third has one alone).
        if (most > 1) {
            for (int32_t i = 0; i < n; i++) CPU_SET(h->cpus[i].id, &set);
        }
        for (int32_t c = 0; c < CPU_SETSIZE; c++) {
            if (CPU_ISSET(c, &set)) ids[nid++] = c;
            if (CPU_ISSET(c, &h->me.mask)) was[nwas++] = c;
        }
        threads_format_cpu_list(ids, nid, mine, 128);
        threads_format_cpu_list(was, nwas, launcher, 128);
        // A loader thread (loader.h) inherits its creator's mask, which pinning narrows to the
        // main thread's one CPU: where its work would only take turns with the step's. It gets the
        // host's CPUs that no rank's thread is pinned to, when there are some, else the rank's own.
        if (most == 1) {
            cpu_set_t busy;
            CPU_ZERO(&busy);
            for (int32_t k = 0; k < host_threads; k++) // this rank's picks are CPU ids by now
                CPU_SET(k >= off && k < off + T ? pick[k] : h->cpus[pick[k]].id, &busy);
            int32_t spare[CPU_SETSIZE], nspare = 0;
            for (int32_t i = 0; i < n; i++)
                if (!CPU_ISSET(h->cpus[i].id, &busy)) spare[nspare++] = h->cpus[i].id;
            if (nspare > 0) threads_format_cpu_list(spare, nspare, report->loader_cpus, sizeof report->loader_cpus);
            else threads_format_cpu_list(ids, nid, report->loader_cpus, sizeof report->loader_cpus);
            report->loader_shares_cpu = nspare == 0;
        }
        // The main thread's mask first: OpenMP's workers are created from it.
        bool moved = sched_setaffinity(0, sizeof set, &set) == 0;
        report->pinned = moved && most == 1 && pin_threads(chosen, T) == 0;
        if (!moved) {
            snprintf(report->text, sizeof report->text, "%d per rank (%s); could not move rank 0 from CPUs %s to %s",
                     (int)T, h->how ? h->how : "the host's CPUs over its ranks", launcher, mine);
        }
    }
    ember_ctx_free(ctx, pick);
    ember_ctx_free(ctx, want);
    ember_ctx_free(ctx, allowed);
    return st;
}

// The placement's line for the run's report.
static void describe(const host_view *h, int32_t T, int32_t cores, int32_t host_threads, const char *mine,
                     const char *launcher, threads_report *report) {
    const int32_t n = h->n;
    const int nlocal = h->nlocal;
    char count[96];
    if (h->how) snprintf(count, sizeof count, "%d per rank (%s)", (int)T, h->how);
    else if (cores < n)
        snprintf(count, sizeof count, "%d per rank (the cgroup's %d CPUs of time, of %d, over its %d rank%s)", (int)T,
                 (int)cores, (int)n, nlocal, nlocal > 1 ? "s" : "");
    else snprintf(count, sizeof count, "%d per rank (%d CPUs on the host over its %d rank%s)", (int)T, (int)n,
                  nlocal, nlocal > 1 ? "s" : "");
    if (h->user) {
        snprintf(report->text, sizeof report->text, "%s, placed by OpenMP and the launcher (%s)", count,
                 h->got_mask ? "OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY is set" : "affinity unknown");
    } else if (report->pinned) {
        snprintf(report->text, sizeof report->text, "%s, one CPU each; rank 0 on CPU%s %s (mpiexec gave it %s)",
                 count, strpbrk(mine, ",-") ? "s" : "", mine, launcher);
    } else {
        snprintf(report->text, sizeof report->text,
                 "%s, not pinned: %d threads share this host's %d CPUs (%s; mpiexec gave rank 0 %s)", count,
                 (int)host_threads, (int)n, mine, launcher);
    }
}

ember_status threads_setup(ember_ctx *ctx, MPI_Comm world, int32_t requested, threads_report *report) {
    memset(report, 0, sizeof *report);
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0;
    MPI_Comm_rank(world, &rank);
    APP_TRY(app_mpi_status(ctx, MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
                           "thread placement: host communicator"));
    host_view h;
    memset(&h, 0, sizeof h);
    h.nlocal = 1;
    MPI_Comm_rank(node, &h.local);
    MPI_Comm_size(node, &h.nlocal);
    look_at_self(&h, requested);
    ember_status st = gather_views(ctx, world, node, &h);
    if (st == EMBER_OK) list_host_cpus(&h);
    // The threads: as asked, or the host's CPUs shared out among its ranks.
    int32_t cores = h.n;
    const int32_t share = threads_default_count(h.n, h.limit, h.nlocal, &cores);
    int32_t T = h.me.want > 0 ? h.me.want : share;
    char mine[128] = "", launcher[128] = "";
    int32_t host_threads = 0, per_rank = -1;
    for (int r = 0; r < h.nlocal && st == EMBER_OK; r++) {
        const int32_t w = h.all[r].want > 0 ? h.all[r].want : share;
        host_threads += w;
        per_rank = per_rank < 0 || per_rank == w ? w : 0; // 0: ranks differ
    }
    report->host_first = h.local == 0;
    if (st == EMBER_OK && h.n > 0) {
        threads_oversubscribed(h.nlocal, host_threads, per_rank, cores, report->warning, sizeof report->warning);
    }
    if (st == EMBER_OK && !h.user) st = place(ctx, &h, share, T, host_threads, report, mine, launcher);
#ifdef _OPENMP
    omp_set_num_threads(T);
#endif
    ember_ctx_set_num_threads(ctx, T);
    report->threads = T;
    if (st == EMBER_OK && report->text[0] == '\0') describe(&h, T, cores, host_threads, mine, launcher, report);
    ember_ctx_free(ctx, h.cpus);
    ember_ctx_free(ctx, h.all);
    MPI_Comm_free(&node);
    return st;
}

ember_status threads_start_mpi(int argc, char **argv, int32_t requested, double timeout_s, ember_ctx **ctx,
                               ember_comm **comm, threads_report *placement) {
    *ctx = NULL;
    *comm = NULL;
    threads_reexec(argc, argv, requested); // may start the program again, before MPI
    MPI_Init(NULL, NULL);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = requested;
    ember_status st = ember_ctx_create(&cc, ctx);
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (*ctx) ember_ctx_set_rank(*ctx, world_rank);
    // Agreed before the communicator's collective creation; the other ranks name the one that
    // failed (its own message went to its stderr: it has no context).
    int failed = first_failure(MPI_COMM_WORLD, st == EMBER_OK);
    if (st == EMBER_OK && failed >= 0) {
        ember_ctx_set_rank(*ctx, failed);
        st = ember_ctx_set_error(*ctx, EMBER_ERR_REMOTE,
                                 "ember_ctx_create failed (its reason is on that rank's stderr)");
        ember_ctx_set_rank(*ctx, world_rank);
    }
    if (st == EMBER_OK) st = threads_setup(*ctx, MPI_COMM_WORLD, requested, placement); // before any parallel region
    if (st == EMBER_OK && placement->warning[0] && placement->host_first) {
        fprintf(stderr, "ember %s: warning: %s\n", argc > 0 ? argv[0] : "", placement->warning);
        fflush(stderr);
    }
    if (st == EMBER_OK) st = ember_comm_create(*ctx, MPI_COMM_WORLD, comm);
    if (st == EMBER_OK) st = ember_comm_set_timeout(*comm, timeout_s);
    return st;
}

int threads_finish_mpi(const char *cmd, ember_status st, ember_ctx *ctx, ember_comm *comm) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (st == EMBER_ERR_TIMEOUT) {
        // A rank missed a collective: the others cannot meet it to finalise, and MPI cannot
        // cancel what they started. Every rank that timed out says so (the first rank may be
        // the one that stalled) and leaves without finalising, which makes the launcher end the
        // job (the stalled rank included) and exit non-zero. Not MPI_Abort: it has the launcher
        // kill every rank at once, and a message still in the launcher's pipe from this rank or
        // another was lost with it (seen under MPICH); a rank that exits is only counted as gone
        // once its output is read to the end (Open MPI and MPICH both), so every message arrives.
        fprintf(stderr, "ember %s: error: %s\n", cmd, ember_ctx_errmsg(ctx));
        fflush(NULL);
        _exit(1);
    }
    if (st != EMBER_OK && rank == 0)
        fprintf(stderr, "ember %s: error: %s\n", cmd, ctx ? ember_ctx_errmsg(ctx) : ember_status_str(st));
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
    return st == EMBER_OK ? 0 : 1;
}
