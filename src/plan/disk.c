// ember_plan_probe_disk (plan.h): the rate a tiered table's file moves records, measured the way
// the table moves them (a reserved file, mapped, written, flushed to the disk and read back).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "ember/plan.h"

static volatile unsigned probe_sink;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ember_status ember_plan_probe_disk(ember_ctx *ctx, const char *dir, int64_t bytes, double *bw) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_plan_probe_disk";
    EMBER_CHECK(ctx, bw != NULL && bytes >= 4096 && bytes <= ((int64_t)1 << 34), EMBER_ERR_INVALID_ARG,
                "%s: %lld bytes (4 KiB to 16 GiB) or a NULL result", fn, (long long)bytes);
    const char *env = getenv("TMPDIR");
    if (!dir || !dir[0]) dir = env && env[0] ? env : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/ember-probe-XXXXXX", dir);
    const int fd = mkstemp(path);
    if (fd < 0) return ember__error(ctx, EMBER_ERR_IO, "%s: cannot create a file in '%s': %s", fn, dir, strerror(errno));
    unlink(path);
    const size_t n = (size_t)bytes;
    int e = posix_fallocate(fd, 0, (off_t)n);
    unsigned char *map = e == 0 ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (e == 0 && map == MAP_FAILED) e = errno;
    if (e != 0) {
        close(fd);
        return ember__error(ctx, EMBER_ERR_IO, "%s: cannot reserve %lld bytes in '%s': %s", fn, (long long)bytes, dir,
                            strerror(e));
    }
    const double t0 = now_s();
    for (size_t i = 0; i < n; i += 4096) memset(map + i, (int)(i >> 12) | 1, n - i < 4096 ? n - i : 4096);
    const int synced = msync(map, n, MS_SYNC);
    // Read back what the disk holds: the pages leave the cache first where the kernel lets us.
    posix_fadvise(fd, 0, (off_t)n, POSIX_FADV_DONTNEED);
    madvise(map, n, MADV_DONTNEED);
    unsigned sum = 0;
    for (size_t i = 0; i < n; i += 64) sum += map[i];
    probe_sink = sum; // the reads happen
    const double t = now_s() - t0;
    munmap(map, n);
    close(fd);
    if (synced != 0) return ember__error(ctx, EMBER_ERR_IO, "%s: flushing to '%s': %s", fn, dir, strerror(errno));
    *bw = 2.0 * (double)n / (t > 1e-9 ? t : 1e-9);
    return EMBER_OK;
}
