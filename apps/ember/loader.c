// The prefetching loader (loader.h): a producer thread and a ring of ready batches.
#define _GNU_SOURCE // pthread_setaffinity_np, CPU_SET
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "appctx.h"
#include "loader.h"
#include "threads.h"

typedef struct slot {
    dlrm_batch b;
    ember_status st; // its producer's status (the message is on the loader's context)
    bool eof;
} slot;

struct loader {
    loader_config cfg;    // cfg.cpus is not kept: see cpus
    ember_ctx *ctx;       // the thread's own
    cpu_set_t cpus;       // where the thread may run (ncpus 0: where its creator may)
    int32_t ncpus;
    pthread_t thread;
    pthread_mutex_t mu;   // guards everything below, and hands the ring's slots over
    pthread_cond_t work;  // the thread waits here for room in the ring, a resume or the end
    pthread_cond_t ready; // takers and pausers wait here for a batch, or for production to stop
    bool sync;            // mu, work and ready are initialised
    slot *ring;           // [depth]: ready slots [head, head + count), the one being produced after
    int32_t head, count;
    bool paused;          // the caller holds the producer's state: produce nothing
    bool producing;       // the thread is in produce(), outside the lock
    bool stopped;         // the last slot produced was the end or an error: produce no more
    bool quit;
    ember_status last_st; // the last slot taken, given again while stopped and nothing is ready
    bool last_eof;
};


static void *run(void *arg) {
    loader *l = arg;
    if (l->ncpus > 0) pthread_setaffinity_np(pthread_self(), sizeof l->cpus, &l->cpus); // may be refused: run on
#ifdef _OPENMP
    // The producers' parallel loops run on this thread alone: the rank's OpenMP threads are the
    // step's. (A thread's team size is its own: the main thread's is unchanged.)
    omp_set_num_threads(1);
#endif
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && (l->paused || l->stopped || l->count == l->cfg.depth)) pthread_cond_wait(&l->work, &l->mu);
        if (l->quit) break;
        slot *s = &l->ring[(l->head + l->count) % l->cfg.depth];
        l->producing = true;
        pthread_mutex_unlock(&l->mu);
        bool eof = false;
        ember_ctx_clear_error(l->ctx);
        const ember_status st = l->cfg.produce(l->cfg.arg, l->ctx, &s->b, &eof);
        pthread_mutex_lock(&l->mu);
        l->producing = false;
        s->st = st;
        s->eof = eof;
        l->count++;
        l->stopped = st != EMBER_OK || eof;
        pthread_cond_broadcast(&l->ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

// Frees what loader_create made (the thread already joined, or never started).
static void free_loader(ember_ctx *ctx, loader *l) {
    for (int32_t i = 0; l->ring && i < l->cfg.depth; i++) dlrm_batch_destroy(ctx, &l->ring[i].b);
    ember_ctx_free(ctx, l->ring);
    if (l->sync) {
        pthread_cond_destroy(&l->ready);
        pthread_cond_destroy(&l->work);
        pthread_mutex_destroy(&l->mu);
    }
    ember_ctx_destroy(l->ctx);
    ember_ctx_free(ctx, l);
}

// The mutex and condition variables; false (nothing left initialised) when one cannot be made.
static bool init_sync(loader *l) {
    if (pthread_mutex_init(&l->mu, NULL) != 0) return false;
    if (pthread_cond_init(&l->work, NULL) != 0) {
        pthread_mutex_destroy(&l->mu);
        return false;
    }
    if (pthread_cond_init(&l->ready, NULL) != 0) {
        pthread_cond_destroy(&l->work);
        pthread_mutex_destroy(&l->mu);
        return false;
    }
    return true;
}

ember_status loader_create(ember_ctx *ctx, const loader_config *cfg, loader **out) {
    *out = NULL;
    APP_CHECK(ctx, cfg->depth >= 1 && cfg->produce, EMBER_ERR_INVALID_ARG,
              "data loader: %d batches ahead, expected at least 1", (int)cfg->depth);
    loader *l = app_calloc(ctx, sizeof *l, "the data loader");
    if (!l) return EMBER_ERR_NOMEM;
    l->cfg = *cfg;
    l->cfg.cpus = NULL;
    l->paused = true;
    l->ring = app_calloc(ctx, sizeof(slot) * (size_t)cfg->depth, "the data loader's batches");
    ember_status st = l->ring ? EMBER_OK : EMBER_ERR_NOMEM;
    for (int32_t i = 0; i < cfg->depth && st == EMBER_OK; i++)
    {
        st = dlrm_batch_create(ctx, cfg->capacity, cfg->num_dense, cfg->num_sparse, &l->ring[i].b);
        if (st == EMBER_OK && cfg->bag_width > 0) st = dlrm_batch_reserve_bags(ctx, &l->ring[i].b, cfg->bag_width);
    }
    if (st == EMBER_OK) {
        ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
        cc.num_threads = 1;
        cc.isa = ember_ctx_isa(ctx);
        if (ember_ctx_create(&cc, &l->ctx) != EMBER_OK) {
            st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "data loader: cannot create its context");
        } else {
            ember_ctx_set_rank(l->ctx, ember_ctx_rank(ctx));
        }
    }
    if (st == EMBER_OK && cfg->cpus && cfg->cpus[0]) {
        int32_t ids[CPU_SETSIZE];
        const int32_t n = threads_parse_cpu_list(cfg->cpus, ids, CPU_SETSIZE);
        CPU_ZERO(&l->cpus);
        for (int32_t i = 0; i < n; i++) CPU_SET(ids[i], &l->cpus);
        l->ncpus = n > 0 ? n : 0; // not a list: where the creator runs
    }
    if (st == EMBER_OK) {
        l->sync = init_sync(l);
        if (!l->sync) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "data loader: cannot create its lock");
    }
    if (st == EMBER_OK) {
        // Every signal blocked in the new thread (it inherits this mask): SIGINT and the others
        // go to the main thread, as they did before there was a loader.
        sigset_t all, keep;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &keep);
        const int rc = pthread_create(&l->thread, NULL, run, l);
        pthread_sigmask(SIG_SETMASK, &keep, NULL);
        if (rc != 0)
            st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "data loader: cannot start its thread: %s", strerror(rc));
    }
    if (st != EMBER_OK) {
        free_loader(ctx, l);
        return st;
    }
    *out = l;
    return EMBER_OK;
}

void loader_destroy(ember_ctx *ctx, loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->quit = true;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    free_loader(ctx, l);
}

ember_ctx *loader_ctx(const loader *l) { return l->ctx; }

void loader_pause(loader *l) {
    pthread_mutex_lock(&l->mu);
    l->paused = true;
    while (l->producing) pthread_cond_wait(&l->ready, &l->mu);
    l->head = l->count = 0;
    l->stopped = false;
    l->last_st = EMBER_OK;
    l->last_eof = false;
    pthread_mutex_unlock(&l->mu);
}

void loader_resume(loader *l) {
    pthread_mutex_lock(&l->mu);
    l->paused = false;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
}

ember_status loader_forward_error(ember_ctx *ctx, loader *l, ember_status st) {
    // The loader's message ends in its rank tag, the owner's rank: recorded again on the owner's
    // context without it, the library adds the same tag, and the text is the same.
    const char *msg = ember_ctx_errmsg(l->ctx);
    char tag[32];
    const int32_t rank = ember_ctx_rank(l->ctx);
    snprintf(tag, sizeof tag, " (rank %d)", rank < 0 ? 0 : (int)rank);
    size_t n = strlen(msg);
    const size_t t = strlen(tag);
    if (n >= t && memcmp(msg + n - t, tag, t) == 0) n -= t;
    if (n == 0) return st; // nothing recorded there
    return ember_ctx_set_error(ctx, st, "%.*s", (int)n, msg);
}

ember_status loader_take(ember_ctx *ctx, loader *l, dlrm_batch *b, bool *eof, double *waited_s) {
    APP_ASSERT(b->capacity == l->cfg.capacity && b->num_dense == l->cfg.num_dense &&
               b->num_sparse == l->cfg.num_sparse);
    *waited_s = 0.0;
    pthread_mutex_lock(&l->mu);
    APP_ASSERT(!l->paused);
    ember_status st;
    if (l->count == 0 && l->stopped) {
        // Past the end (or an error): the same answer again, as the producer would give.
        st = l->last_st;
        *eof = l->last_eof;
        b->size = 0;
    } else {
        if (l->count == 0) {
            const double t0 = app_now_s();
            while (l->count == 0) pthread_cond_wait(&l->ready, &l->mu);
            *waited_s = app_now_s() - t0;
        }
        slot *s = &l->ring[l->head];
        const dlrm_batch t = *b;
        *b = s->b;
        s->b = t;
        st = l->last_st = s->st;
        *eof = l->last_eof = s->eof;
        l->head = (l->head + 1) % l->cfg.depth;
        l->count--;
        pthread_cond_broadcast(&l->work);
    }
    pthread_mutex_unlock(&l->mu);
    return st == EMBER_OK ? EMBER_OK : loader_forward_error(ctx, l, st);
}
