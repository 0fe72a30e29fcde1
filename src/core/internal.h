// Internal helpers shared by every layer: error setting, checks, allocation, logging.
// Not installed; names are ember__ (internal, non-static) by convention (public names are ember_ and live in include/).
#ifndef EMBER_CORE_INTERNAL_H
#define EMBER_CORE_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/core.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define EMBER_ERRMSG_CAP 512

struct ember_ctx {
    ember_allocator allocator;
    int32_t num_threads;
    ember_log_fn log;
    void *log_user;
    ember_log_level log_level;
    int32_t rank;               // -1: single process
    ember_isa isa;              // kernel variant (never AUTO)
    ember_status last_status;
    size_t bytes_outstanding;
    char errmsg[EMBER_ERRMSG_CAP];
};

#if defined(__GNUC__)
#define EMBER__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EMBER__PRINTF(a, b)
#endif

// Records `st` and a formatted message "<msg> (rank R)" on ctx; returns st.
ember_status ember__error(ember_ctx *ctx, ember_status st, const char *fmt, ...) EMBER__PRINTF(3, 4);
ember_status ember__verror(ember_ctx *ctx, ember_status st, const char *fmt, va_list ap) EMBER__PRINTF(3, 0);
// Sends a message to the context's log callback (or stderr) if at or above its level.
void ember__log(ember_ctx *ctx, ember_log_level level, const char *fmt, ...) EMBER__PRINTF(3, 4);

// Allocation through the context's hooks, 64-byte aligned, counted in bytes_outstanding.
// ember__alloc returns NULL on failure without setting an error; ember__xalloc sets
// EMBER_ERR_NOMEM on ctx naming `what`. ember__calloc zeroes. free accepts NULL.
void *ember__alloc(ember_ctx *ctx, size_t bytes);
void *ember__calloc(ember_ctx *ctx, size_t bytes);
void *ember__xalloc(ember_ctx *ctx, size_t bytes, const char *what);
void ember__free(ember_ctx *ctx, void *p);
// A counted copy of a NUL-terminated string (NULL on failure, no error set).
char *ember__strdup(ember_ctx *ctx, const char *s);
// Large slabs: 2 MiB aligned and advised for transparent huge pages. Zeroed.
void *ember__alloc_slab(ember_ctx *ctx, size_t bytes, const char *what);
void ember__free_slab(ember_ctx *ctx, void *p);

// A grow-on-demand buffer owned by an object (workspaces): reserve never shrinks it and keeps
// no contents. NULL + EMBER_ERR_NOMEM on ctx when the allocation fails.
typedef struct ember__buf {
    void *p;
    size_t cap;
} ember__buf;
void *ember__buf_reserve(ember_ctx *ctx, ember__buf *b, size_t bytes);
void ember__buf_free(ember_ctx *ctx, ember__buf *b);

// Checks a condition on user input; on failure records the message and returns `st`.
#define EMBER_CHECK(ctx, cond, st, ...)                 \
    do {                                                \
        if (!(cond)) return ember__error((ctx), (st), __VA_ARGS__); \
    } while (0)

// Returns the status of `expr` if it is not EMBER_OK.
#define EMBER_TRY(expr)                                 \
    do {                                                \
        ember_status ember__st_ = (expr);               \
        if (ember__st_ != EMBER_OK) return ember__st_;  \
    } while (0)

// Internal invariant (never user input): aborts with file/line when violated.
void ember__assert_fail(const char *expr, const char *file, int line);
#define EMBER_ASSERT(cond) \
    do { if (!(cond)) ember__assert_fail(#cond, __FILE__, __LINE__); } while (0)

// Thread count the kernels use for this context.
int ember__threads(const ember_ctx *ctx);

// The calling thread's number in its OpenMP team (0 outside one, or without OpenMP): the index of
// its slice of a per-thread scratch.
static inline int ember__thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// The name tables of the API's enums (one per enum, next to its other definitions): value v's
// name in a table of n ("unknown" outside it), and the inverse (EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG and *out unchanged; a NULL name or out is refused).
const char *ember__enum_name(const char *const *names, int n, int v);
ember_status ember__enum_parse(const char *const *names, int n, const char *name, int *out);
// Defines the public pair `<prefix>_name` / `<prefix>_parse` of an enum `type` whose values are
// 0 .. n-1, from its names in value order.
#define EMBER__ENUM_NAMES(prefix, type, ...)                                                         \
    static const char *const prefix##_names_[] = {__VA_ARGS__};                                    \
    enum { prefix##_count_ = (int)(sizeof prefix##_names_ / sizeof prefix##_names_[0]) };           \
    const char *prefix##_name(type v) { return ember__enum_name(prefix##_names_, prefix##_count_, (int)v); } \
    ember_status prefix##_parse(const char *name, type *out) {                                      \
        int v = 0;                                                                                  \
        const ember_status st = ember__enum_parse(prefix##_names_, prefix##_count_, name, &v);     \
        if (st == EMBER_OK && out) *out = (type)v;                                                  \
        return st;                                                                                  \
    }

// The digest (ember_digest) of a NUL-terminated string (NULL has a digest of its own).
uint64_t ember__str_digest(const char *s);

// Size-checked multiply for byte counts; false on overflow.
static inline bool ember__mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

#endif
