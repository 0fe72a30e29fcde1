// Durable files (durable.h): temporary name, fsync, rename, directory fsync.
#define _POSIX_C_SOURCE 200809L

#include "state/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static int64_t fail_budget = -1; // test hook: bytes left before an injected failure
static int fail_errno = 0;

void ember__dfile_fail_after(int64_t bytes, int err) {
    fail_budget = bytes;
    fail_errno = err;
}

int ember__dfile_open(ember__dfile *d, const char *path) {
    memset(d, 0, sizeof *d);
    const size_t n = strlen(path);
    if (n >= EMBER__PATH_MAX) return d->err = ENAMETOOLONG;
    memcpy(d->path, path, n + 1);
    memcpy(d->tmp, path, n);
    memcpy(d->tmp + n, ".partial", sizeof ".partial");
    d->f = fopen(d->tmp, "wb");
    if (!d->f) return d->err = errno;
    return 0;
}

int ember__dfile_write(ember__dfile *d, const void *p, size_t n) {
    if (d->err || n == 0) return d->err;
    if (fail_budget >= 0) {
        if ((int64_t)n > fail_budget) {
            fail_budget = -1;
            return d->err = fail_errno;
        }
        fail_budget -= (int64_t)n;
    }
    if (fwrite(p, 1, n, d->f) != n) d->err = errno ? errno : EIO;
    return d->err;
}

// fsync of the directory holding `path`, so that the rename itself is durable.
static int sync_dir(const char *path) {
    char dir[EMBER__PATH_MAX];
    strcpy(dir, path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    int err = 0;
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return errno;
    if (fsync(fd) != 0 && errno != EINVAL) err = errno; // some file systems cannot sync a directory
    close(fd);
    return err;
}

int ember__dfile_commit(ember__dfile *d) {
    if (!d->f) return d->err ? d->err : EBADF;
    int err = d->err;
    if (!err && fflush(d->f) != 0) err = errno;
    if (!err && fsync(fileno(d->f)) != 0) err = errno;
    if (fclose(d->f) != 0 && !err) err = errno;
    d->f = NULL;
    if (!err && rename(d->tmp, d->path) != 0) err = errno;
    if (err) unlink(d->tmp);
    else err = sync_dir(d->path);
    return d->err = err;
}

void ember__dfile_abort(ember__dfile *d) {
    if (d->f) {
        fclose(d->f);
        d->f = NULL;
        unlink(d->tmp);
    }
}
