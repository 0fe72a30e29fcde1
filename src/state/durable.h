// Durable files for checkpoints: a file is written under a temporary name beside its target
// ("<path>.partial"), flushed and fsync'd, then renamed over the target and the directory
// fsync'd. Whoever opens `path` sees the previous file or the whole new one, never a part of
// one: a process killed at any instant, a full disk or an I/O error leaves the previous file as
// it was. A save that fails removes its temporary file; one that was killed leaves it, and the
// next save to the same path replaces it.
//
// Every call returns 0 or the errno of the first failure (the caller names the path and
// strerror of it). Local; plain POSIX I/O.
#ifndef EMBER_STATE_DURABLE_H
#define EMBER_STATE_DURABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EMBER__PATH_MAX 4096

// No heap: the library's memory goes through the context's allocator, and a path fits here.
typedef struct ember__dfile {
    FILE *f;
    char path[EMBER__PATH_MAX];     // the target
    char tmp[EMBER__PATH_MAX + 16]; // "<path>.partial"
    int err;                        // first errno, 0 while all is well
} ember__dfile;

// Opens "<path>.partial" for writing (truncating a leftover of a killed save). ENAMETOOLONG for
// a path of EMBER__PATH_MAX bytes or more.
int ember__dfile_open(ember__dfile *d, const char *path);
// Appends n bytes (nothing once an error happened; the error is kept for commit).
int ember__dfile_write(ember__dfile *d, const void *p, size_t n);
// Flushes, fsyncs and closes the temporary file, renames it over the target and fsyncs the
// directory. On failure the temporary file is removed and the target is untouched.
int ember__dfile_commit(ember__dfile *d);
// Closes and removes the temporary file (a save given up); the target is untouched.
void ember__dfile_abort(ember__dfile *d);

// Test hook: the write that would take the bytes written through durable files (since this
// call) past `bytes` fails with `err` (e.g. ENOSPC), as a full disk would. bytes < 0: off.
void ember__dfile_fail_after(int64_t bytes, int err);

#endif
