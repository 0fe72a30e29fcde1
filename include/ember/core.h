// ember/core.h — status codes, the library context, version.
//
// Every fallible ember call returns an `ember_status` (0 ok, negative error) and leaves a
// detailed message on the context it was given (`ember_ctx_errmsg`), naming the rank, the
// feature or table and the offending value. Nothing in the library calls exit/abort on user
// input or prints to stdout; diagnostics go to the context's log callback.
//
// A context owns: the allocator hooks (every byte the library allocates goes through them and
// is counted, see ember_ctx_bytes_outstanding), the thread count used by kernels, the log
// callback and the last error message. A context is thread-compatible: use one per thread of
// control, or serialise calls on it. Objects created with a context borrow it; destroy them
// before the context.
//
// Arrays the caller passes (ids, lengths, weights, gradients, outputs, state) are read and
// written through typed pointers: each must be aligned to its element type (a float array to 4
// bytes, an int64 array to 8), as malloc'ed and numpy-owned arrays are. The Python package copies
// an unaligned input and refuses an unaligned output.
#ifndef EMBER_CORE_H
#define EMBER_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define EMBER_API __attribute__((visibility("default")))
#else
#define EMBER_API
#endif

// The one status table: X(NAME, value, message). It generates the enum, ember_status_name()
// and ember_status_str().
#define EMBER_STATUS_MAP(X)                                                  \
    X(EMBER_OK,               0, "success")                                  \
    X(EMBER_ERR_INVALID_ARG,  -1, "invalid argument")                        \
    X(EMBER_ERR_OUT_OF_RANGE, -2, "id outside its table")                    \
    X(EMBER_ERR_NOMEM,        -3, "out of memory")                           \
    X(EMBER_ERR_IO,           -4, "I/O error")                               \
    X(EMBER_ERR_COMM,         -5, "communication failure")                   \
    X(EMBER_ERR_REMOTE,       -6, "another rank failed this call")           \
    X(EMBER_ERR_NUMERIC,      -7, "non-finite value")                        \
    X(EMBER_ERR_UNSUPPORTED,  -8, "unsupported configuration")               \
    X(EMBER_ERR_STATE,        -9, "call out of order for the object's state") \
    X(EMBER_ERR_FORMAT,      -10, "malformed data")                         \
    X(EMBER_ERR_TIMEOUT,     -11, "a collective missed its deadline")         \
    X(EMBER_ERR_DEVICE,      -12, "the GPU or its runtime failed")

typedef enum ember_status {
#define EMBER_STATUS_ENUM_(name, value, msg) name = value,
    EMBER_STATUS_MAP(EMBER_STATUS_ENUM_)
#undef EMBER_STATUS_ENUM_
} ember_status;

// The enum name without its prefix ("OUT_OF_RANGE", "OK"); "UNKNOWN" for a value outside the table.
EMBER_API const char *ember_status_name(ember_status st);
// One-line description ("id outside its table").
EMBER_API const char *ember_status_str(ember_status st);

// A 64-bit digest of n bytes: equal bytes give equal digests on every rank and host (for
// comparing what ranks were given, e.g. an ember_arg of ember/comm.h; not for security). Local.
EMBER_API uint64_t ember_digest(const void *p, size_t n);

// Library version "MAJOR.MINOR.PATCH" and a one-line build description (compiler, flags that
// matter: OpenMP, MPI, CBLAS).
EMBER_API const char *ember_version(void);
EMBER_API const char *ember_build_info(void);

typedef enum ember_log_level {
    EMBER_LOG_DEBUG = 0,
    EMBER_LOG_INFO = 1,
    EMBER_LOG_WARN = 2,
    EMBER_LOG_ERROR = 3,
} ember_log_level;

// Allocator hooks. `alloc` returns `size` bytes aligned to at least 64 (NULL on failure);
// `free` accepts any pointer `alloc` returned. Zero hooks mean the C library's malloc/free.
typedef struct ember_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr);
    void *user;
} ember_allocator;

typedef void (*ember_log_fn)(void *user, ember_log_level level, const char *msg);

// Instruction-set variants of the kernels. One library holds every variant the compiler could
// build for the target (each kernel file compiled with its own target flags); a context picks
// one at creation. Every variant gives bitwise-identical results: they perform the same IEEE
// operations in the same order (no reassociation; no fused multiply-add in the embedding
// kernels, and in the dense products of ember/dense.h one fused multiply-add chain per output,
// C's fmaf in GENERIC), only wider.
//   GENERIC  portable C for the target's baseline (x86-64: SSE2; any other architecture)
//   AVX2     x86-64 with AVX2, FMA and F16C (hardware fp16 <-> fp32 conversion)
//   AVX512   x86-64 with AVX-512 F, BW, VL and DQ
// The AVX-512 FP16 and BF16 arithmetic instructions are not used: their dot products and
// conversions flush subnormals or round differently, which would break the bitwise promise;
// fp16/bf16 storage is converted exactly (F16C / AVX-512F conversions, integer shifts).
typedef enum ember_isa {
    EMBER_ISA_AUTO = 0, // the environment variable EMBER_ISA if set, else the best the CPU runs
    EMBER_ISA_GENERIC = 1,
    EMBER_ISA_AVX2 = 2,
    EMBER_ISA_AVX512 = 3,
} ember_isa;
#define EMBER_ISA_COUNT 4

// "auto", "generic", "avx2", "avx512" ("unknown" outside the enum).
EMBER_API const char *ember_isa_name(ember_isa isa);
// Parses a name as above; returns EMBER_ERR_INVALID_ARG for anything else.
EMBER_API ember_status ember_isa_parse(const char *name, ember_isa *out);
// Whether this build holds the variant and this CPU (and operating system) can run it. When not,
// `why` (if not NULL) receives a sentence: "this CPU lacks avx512f avx512bw" or "not built".
EMBER_API int ember_isa_supported(ember_isa isa, char *why, size_t cap);
// The best variant this build and CPU can run.
EMBER_API ember_isa ember_isa_best(void);
// The CPU's model name ("AMD EPYC 9R14", or "unknown") and its relevant features
// ("avx2 fma f16c avx512f ..."), for logs and benchmark records.
EMBER_API const char *ember_cpu_name(void);
EMBER_API const char *ember_cpu_features(void);

typedef struct ember_ctx_config {
    ember_allocator allocator;  // zero: malloc/free
    int32_t num_threads;        // kernels' OpenMP threads; 0: omp_get_max_threads()
    ember_log_fn log;           // NULL: messages at or above log_level go to stderr
    void *log_user;
    ember_log_level log_level;  // default (0) DEBUG is raised to WARN when log is NULL
    ember_isa isa;              // kernel variant; AUTO: $EMBER_ISA, else ember_isa_best()
} ember_ctx_config;
#define EMBER_CTX_CONFIG_DEFAULT                                                                      \
    {.allocator = {0}, .num_threads = 0, .log = NULL, .log_user = NULL, .log_level = EMBER_LOG_DEBUG,    \
     .isa = EMBER_ISA_AUTO}

typedef struct ember_ctx ember_ctx;

// Creates a context. cfg may be NULL (all defaults). On failure *out is NULL.
// The kernel variant is cfg->isa, or when that is AUTO the one named by the environment variable
// EMBER_ISA (generic|avx2|avx512; forces a lower variant than the CPU's best, e.g. to compare),
// or else ember_isa_best(). A variant the build or CPU cannot run is an error, never a silent
// fallback. Without a context to hold a message, ember_isa_supported() says why.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (out NULL, num_threads < 0, unknown isa or
// EMBER_ISA value), EMBER_ERR_UNSUPPORTED (the variant cannot run here), EMBER_ERR_NOMEM.
EMBER_API ember_status ember_ctx_create(const ember_ctx_config *cfg, ember_ctx **out);
// Destroys a context; NULL is accepted. Objects created on it must be destroyed first.
EMBER_API void ember_ctx_destroy(ember_ctx *ctx);

// The message of the last failed call on this context ("" if none). Valid until the next call.
EMBER_API const char *ember_ctx_errmsg(const ember_ctx *ctx);
// The status of the last failed call (EMBER_OK if none); ember_ctx_clear_error resets both.
EMBER_API ember_status ember_ctx_last_status(const ember_ctx *ctx);
EMBER_API void ember_ctx_clear_error(ember_ctx *ctx);

// Records a failure on the context as the library does (status + message + " (rank R)"), so a
// program's own errors travel the same way, e.g. through ember_comm_agree to every rank.
// Returns `st`. printf-style format. Local.
EMBER_API ember_status ember_ctx_set_error(ember_ctx *ctx, ember_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

// Memory through the context's allocator hooks, 64-byte aligned and counted in
// ember_ctx_bytes_outstanding (for programs and bindings that account their own buffers with the
// library's). NULL on failure (no error recorded); free accepts NULL. Local.
EMBER_API void *ember_ctx_alloc(ember_ctx *ctx, size_t bytes);
EMBER_API void ember_ctx_free(ember_ctx *ctx, void *ptr);

// Kernel thread count. Results are bitwise identical for every thread count.
EMBER_API int32_t ember_ctx_num_threads(const ember_ctx *ctx);
EMBER_API ember_status ember_ctx_set_num_threads(ember_ctx *ctx, int32_t n);

// The kernel variant this context runs (never AUTO).
EMBER_API ember_isa ember_ctx_isa(const ember_ctx *ctx);

// Bytes currently allocated through this context (0 after every object is destroyed).
EMBER_API size_t ember_ctx_bytes_outstanding(const ember_ctx *ctx);

// The rank named in error messages. ember_comm_create sets it to the communicator rank;
// -1 (the default) means "single process" and messages say "(rank 0)".
EMBER_API void ember_ctx_set_rank(ember_ctx *ctx, int32_t rank);
EMBER_API int32_t ember_ctx_rank(const ember_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
