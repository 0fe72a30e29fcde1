// python/src/context.c — what every ember object of the binding holds: its context, created with
// the counting allocator hooks (ember.bytes_outstanding()), and its lock.
#include "binding.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The allocator hooks of every context the binding creates: one process-wide count of the bytes
// they hold. Each block carries its size in a 64-byte header, so that the returned pointer keeps
// the 64-byte alignment the library's hooks must give. Atomic: the library allocates and frees
// from kernel threads and several contexts run at once.
#define EMBER_PY_HEADER 64
static atomic_llong live_bytes;

static void *counted_alloc(void *user, size_t size) {
    (void)user;
    if (size > SIZE_MAX - 2 * EMBER_PY_HEADER) return NULL;
    const size_t total = (size + EMBER_PY_HEADER + (EMBER_PY_HEADER - 1)) & ~(size_t)(EMBER_PY_HEADER - 1);
    unsigned char *block = aligned_alloc(EMBER_PY_HEADER, total);
    if (!block) return NULL;
    memcpy(block, &size, sizeof size);
    atomic_fetch_add(&live_bytes, (long long)size);
    return block + EMBER_PY_HEADER;
}

static void counted_free(void *user, void *ptr) {
    (void)user;
    if (!ptr) return;
    unsigned char *block = (unsigned char *)ptr - EMBER_PY_HEADER;
    size_t size;
    memcpy(&size, block, sizeof size);
    atomic_fetch_sub(&live_bytes, (long long)size);
    free(block);
}

long long ember_py_bytes_outstanding(void) { return atomic_load(&live_bytes); }

PyObject *ember_py_bytes_outstanding_fn(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLongLong(ember_py_bytes_outstanding());
}

int ember_py_ctx_create(int32_t num_threads, ember_ctx **out) {
    *out = NULL;
    if (num_threads < 0) {
        ember_py_invalid("num_threads: %d is negative (0: every OpenMP thread)", (int)num_threads);
        return -1;
    }
    ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
    cfg.allocator.alloc = counted_alloc;
    cfg.allocator.free = counted_free;
    cfg.num_threads = num_threads;
    ember_status st = ember_ctx_create(&cfg, out);
    if (st != EMBER_OK) {
        // No context to hold the message: say what the library's contract says.
        char why[160] = "";
        if (st == EMBER_ERR_UNSUPPORTED) {
            ember_isa isa;
            const char *env = getenv("EMBER_ISA");
            if (env && ember_isa_parse(env, &isa) == EMBER_OK) ember_isa_supported(isa, why, sizeof why);
        }
        ember_py_error(st, -1, "ember_ctx_create: %s%s%s", ember_status_str(st), *why ? ": " : "", why);
        return -1;
    }
    return 0;
}

void ember_py_lock(PyThread_type_lock lock) {
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK)) return;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
}
