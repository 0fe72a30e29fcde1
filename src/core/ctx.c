// The library context: allocator hooks with byte accounting, threads, log, last error.
// madvise and MADV_HUGEPAGE are not ISO C: under -std=c11 <sys/mman.h> hides them unless
// _DEFAULT_SOURCE is defined, and the `#ifdef MADV_HUGEPAGE` below then silently skipped the
// huge-page advice (4 KiB pages make the row gather TLB-bound: docs/performance.md).
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/internal.h"

#ifndef EMBER_VERSION_STRING
#define EMBER_VERSION_STRING "0.0.0"
#endif

const char *ember_version(void) { return EMBER_VERSION_STRING; }

const char *ember_build_info(void) {
    return "ember " EMBER_VERSION_STRING
#if defined(__clang__)
           " clang " __clang_version__
#elif defined(__GNUC__)
           " gcc " __VERSION__
#endif
#ifdef _OPENMP
           " openmp"
#endif
           " kernels generic"
#ifdef EMBER_HAVE_ISA_AVX2
           ",avx2"
#endif
#ifdef EMBER_HAVE_ISA_AVX512
           ",avx512"
#endif
#ifdef EMBER_WITH_MPI
           " mpi"
#endif
#ifdef EMBER_WITH_CBLAS
           " cblas"
#endif
        ;
}

// Every allocation carries a 64-byte header in front of the aligned block: the raw pointer
// from the hook and the byte count, so frees are counted without asking the caller.
typedef struct header {
    void *raw;
    size_t bytes;
    int slab;
} header;
#define HDR 64

static void *default_alloc(void *user, size_t size) { (void)user; return malloc(size); }
static void default_free(void *user, void *ptr) { (void)user; free(ptr); }

static void *aligned_block(ember_ctx *ctx, size_t bytes, size_t align, int slab) {
    size_t total;
    if (bytes > SIZE_MAX - HDR - align) return NULL;
    total = bytes + HDR + align;
    void *raw = ctx->allocator.alloc(ctx->allocator.user, total);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)raw + HDR + align - 1) & ~(uintptr_t)(align - 1);
    header *h = (header *)(p - sizeof(header));
    h->raw = raw;
    h->bytes = bytes;
    h->slab = slab;
    ctx->bytes_outstanding += bytes;
    return (void *)p;
}

void *ember__alloc(ember_ctx *ctx, size_t bytes) {
    return aligned_block(ctx, bytes ? bytes : 1, 64, 0);
}

void *ember__calloc(ember_ctx *ctx, size_t bytes) {
    void *p = ember__alloc(ctx, bytes);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return p;
}

void *ember__xalloc(ember_ctx *ctx, size_t bytes, const char *what) {
    void *p = ember__alloc(ctx, bytes);
    if (!p) ember__error(ctx, EMBER_ERR_NOMEM, "cannot allocate %zu bytes for %s", bytes, what);
    return p;
}

char *ember__strdup(ember_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ember__alloc(ctx, n);
    if (p) memcpy(p, s, n);
    return p;
}

void ember__free(ember_ctx *ctx, void *p) {
    if (!p) return;
    header *h = (header *)((uintptr_t)p - sizeof(header));
    ctx->bytes_outstanding -= h->bytes;
    ctx->allocator.free(ctx->allocator.user, h->raw);
}

void *ember__buf_reserve(ember_ctx *ctx, ember__buf *b, size_t bytes) {
    if (b->p && b->cap >= bytes) return b->p;
#ifdef __SANITIZE_ADDRESS__
    size_t cap = bytes; // exact, so AddressSanitizer sees any overrun of what was asked for
#else
    size_t cap = bytes + bytes / 2 + 64;
#endif
    void *p = ember__xalloc(ctx, cap, "workspace");
    if (!p) return NULL;
    ember__free(ctx, b->p);
    b->p = p;
    b->cap = cap;
    return p;
}

void ember__buf_free(ember_ctx *ctx, ember__buf *b) {
    ember__free(ctx, b->p);
    b->p = NULL;
    b->cap = 0;
}

#define SLAB_ALIGN ((size_t)2 << 20)

void *ember__alloc_slab(ember_ctx *ctx, size_t bytes, const char *what) {
    // Slabs under 2 MiB gain nothing from huge pages; keep them cache-line aligned only.
    size_t align = bytes >= SLAB_ALIGN ? SLAB_ALIGN : 64;
    void *p = aligned_block(ctx, bytes ? bytes : 1, align, 1);
    if (!p) {
        ember__error(ctx, EMBER_ERR_NOMEM, "cannot allocate %zu bytes for %s", bytes, what);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (align == SLAB_ALIGN) (void)madvise(p, (bytes + SLAB_ALIGN - 1) & ~(SLAB_ALIGN - 1), MADV_HUGEPAGE);
#endif
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

void ember__free_slab(ember_ctx *ctx, void *p) { ember__free(ctx, p); }

// A failed ember_ctx_create has no context to keep its message: it goes to the configured log
// callback, or to stderr.
static ember_status create_error(const ember_ctx_config *c, ember_status st, const char *fmt, ...)
    EMBER__PRINTF(3, 4);
static ember_status create_error(const ember_ctx_config *c, ember_status st, const char *fmt, ...) {
    char buf[EMBER_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->log) c->log(c->log_user, EMBER_LOG_ERROR, buf);
    else fprintf(stderr, "ember error: %s\n", buf);
    return st;
}

// The kernel variant of a new context (see ember_ctx_create).
static ember_status resolve_isa(const ember_ctx_config *c, ember_isa *out) {
    ember_isa isa = c->isa;
    const char *from = "ember_ctx_config.isa";
    if ((int)isa < 0 || (int)isa >= EMBER_ISA_COUNT)
        return create_error(c, EMBER_ERR_INVALID_ARG, "ember_ctx_create: unknown isa %d", (int)isa);
    if (isa == EMBER_ISA_AUTO) {
        const char *env = getenv("EMBER_ISA");
        if (env && *env) {
            from = "EMBER_ISA";
            if (ember_isa_parse(env, &isa) != EMBER_OK)
                return create_error(c, EMBER_ERR_INVALID_ARG,
                                    "ember_ctx_create: EMBER_ISA='%s': expected auto, generic, avx2 or avx512", env);
        }
        if (isa == EMBER_ISA_AUTO) isa = ember_isa_best();
    }
    char why[128];
    if (!ember_isa_supported(isa, why, sizeof why))
        return create_error(c, EMBER_ERR_UNSUPPORTED, "ember_ctx_create: %s=%s: %s (CPU: %s; best variant here: %s)",
                            from, ember_isa_name(isa), why, ember_cpu_name(), ember_isa_name(ember_isa_best()));
    *out = isa;
    return EMBER_OK;
}

ember_status ember_ctx_create(const ember_ctx_config *cfg, ember_ctx **out) {
    if (!out) return EMBER_ERR_INVALID_ARG;
    *out = NULL;
    ember_ctx_config c = EMBER_CTX_CONFIG_DEFAULT;
    if (cfg) c = *cfg;
    if (c.num_threads < 0) return EMBER_ERR_INVALID_ARG;
    if ((c.allocator.alloc == NULL) != (c.allocator.free == NULL)) return EMBER_ERR_INVALID_ARG;
    ember_isa isa = EMBER_ISA_GENERIC;
    EMBER_TRY(resolve_isa(&c, &isa));
    if (!c.allocator.alloc) {
        c.allocator.alloc = default_alloc;
        c.allocator.free = default_free;
    }
    ember_ctx *ctx = c.allocator.alloc(c.allocator.user, sizeof *ctx);
    if (!ctx) return EMBER_ERR_NOMEM;
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = c.allocator;
    ctx->num_threads = c.num_threads;
    ctx->log = c.log;
    ctx->log_user = c.log_user;
    ctx->log_level = c.log_level;
    if (!c.log && ctx->log_level < EMBER_LOG_WARN) ctx->log_level = EMBER_LOG_WARN;
    ctx->rank = -1;
    ctx->isa = isa;
    *out = ctx;
    return EMBER_OK;
}

void ember_ctx_destroy(ember_ctx *ctx) {
    if (!ctx) return;
    ember_allocator a = ctx->allocator;
    a.free(a.user, ctx);
}

const char *ember_ctx_errmsg(const ember_ctx *ctx) { return ctx ? ctx->errmsg : "no context"; }
ember_status ember_ctx_last_status(const ember_ctx *ctx) { return ctx ? ctx->last_status : EMBER_ERR_INVALID_ARG; }

void ember_ctx_clear_error(ember_ctx *ctx) {
    if (!ctx) return;
    ctx->last_status = EMBER_OK;
    ctx->errmsg[0] = '\0';
}

int32_t ember_ctx_num_threads(const ember_ctx *ctx) { return ctx ? (int32_t)ember__threads(ctx) : 1; }

ember_status ember_ctx_set_num_threads(ember_ctx *ctx, int32_t n) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, n >= 0, EMBER_ERR_INVALID_ARG, "ember_ctx_set_num_threads: negative thread count %d", (int)n);
    ctx->num_threads = n;
    return EMBER_OK;
}

ember_isa ember_ctx_isa(const ember_ctx *ctx) { return ctx ? ctx->isa : EMBER_ISA_GENERIC; }

size_t ember_ctx_bytes_outstanding(const ember_ctx *ctx) { return ctx ? ctx->bytes_outstanding : 0; }
void ember_ctx_set_rank(ember_ctx *ctx, int32_t rank) { if (ctx) ctx->rank = rank; }
int32_t ember_ctx_rank(const ember_ctx *ctx) { return ctx ? ctx->rank : -1; }

int ember__threads(const ember_ctx *ctx) {
    if (ctx->num_threads > 0) return ctx->num_threads;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

ember_status ember__verror(ember_ctx *ctx, ember_status st, const char *fmt, va_list ap) {
    if (!ctx) return st;
    // The rank tag always fits: a message too long for the rest is cut and ends in "...".
    enum { TAG_ROOM = 24 };
    int n = vsnprintf(ctx->errmsg, EMBER_ERRMSG_CAP - TAG_ROOM, fmt, ap);
    if (n < 0) n = 0;
    if (n >= EMBER_ERRMSG_CAP - TAG_ROOM) {
        n = EMBER_ERRMSG_CAP - TAG_ROOM - 1;
        memcpy(ctx->errmsg + n - 3, "...", 3);
    }
    snprintf(ctx->errmsg + n, EMBER_ERRMSG_CAP - (size_t)n, " (rank %d)", ctx->rank < 0 ? 0 : (int)ctx->rank);
    ctx->last_status = st;
    return st;
}

ember_status ember_ctx_set_error(ember_ctx *ctx, ember_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ember__verror(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

void *ember_ctx_alloc(ember_ctx *ctx, size_t bytes) { return ctx ? ember__alloc(ctx, bytes) : NULL; }
void ember_ctx_free(ember_ctx *ctx, void *ptr) {
    if (ctx) ember__free(ctx, ptr);
}

ember_status ember__error(ember_ctx *ctx, ember_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ember__verror(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

void ember__log(ember_ctx *ctx, ember_log_level level, const char *fmt, ...) {
    if (!ctx || level < ctx->log_level) return;
    char buf[EMBER_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (ctx->log) {
        ctx->log(ctx->log_user, level, buf);
    } else {
        static const char *names[] = {"debug", "info", "warning", "error"};
        fprintf(stderr, "ember %s (rank %d): %s\n", names[level & 3], ctx->rank < 0 ? 0 : (int)ctx->rank, buf);
    }
}

void ember__assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "ember: internal invariant violated: %s at %s:%d\n", expr, file, line);
    abort();
}
