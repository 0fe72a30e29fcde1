// appctx.h — the app's allocation and error helpers, on the library's public context API only
// (ember_ctx_alloc, ember_ctx_free, ember_ctx_set_error): the app builds against include/ alone.
#ifndef EMBER_APP_APPCTX_H
#define EMBER_APP_APPCTX_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/core.h"

// Seconds on the monotonic clock (defined in train.c).
double app_now_s(void);

// Context memory (64-byte aligned, counted); on failure records EMBER_ERR_NOMEM naming `what`.
static inline void *app_alloc(ember_ctx *ctx, size_t bytes, const char *what) {
    void *p = ember_ctx_alloc(ctx, bytes);
    if (!p) ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "cannot allocate %zu bytes for %s", bytes, what);
    return p;
}

// As app_alloc, zeroed.
static inline void *app_calloc(ember_ctx *ctx, size_t bytes, const char *what) {
    void *p = app_alloc(ctx, bytes, what);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return p;
}

// The index of `name` in names[0..n), or -1 (also for NULL): the app's own enums' _parse.
static inline int app_name_index(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++) {
        if (strcmp(name, names[i]) == 0) return i;
    }
    return -1;
}

// Checks a condition on user input; on failure records the message and returns `st`.
#define APP_CHECK(ctx, cond, st, ...)                                   \
    do {                                                                \
        if (!(cond)) return ember_ctx_set_error((ctx), (st), __VA_ARGS__); \
    } while (0)

// Returns the status of `expr` if it is not EMBER_OK.
#define APP_TRY(expr)                                   \
    do {                                                \
        ember_status app_st_ = (expr);                  \
        if (app_st_ != EMBER_OK) return app_st_;        \
    } while (0)

// Internal invariant (never user input): aborts naming the condition and its place.
#define APP_ASSERT(cond)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "ember: internal invariant violated: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

#endif
