// `ember serve` (run.h, docs/serving.md): the restored serving bundle behind an HTTP server
// (GNU libmicrohttpd, a thread per connection). Handlers parse and check a request, queue it and
// wait; the run's thread is the batcher: it takes the queued requests together, up to --max_batch
// samples or --max_wait_us after the first one, runs one forward of the model and hands each
// request its probabilities. A bad request is answered 4xx alone; the batch never sees it.
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "appctx.h"
#include "run.h"

#define BINARY_MAGIC "EMB1"
#define LATENCY_RING 8192
#define BATCH_BUCKETS 16 // batch sizes 1, 2, 4, ... 2^14, and above

// A request waiting for its probabilities.
typedef struct pending {
    int32_t n;
    float *dense;   // [n][DLRM_NUM_DENSE]
    int64_t *ids;   // [n][DLRM_NUM_SPARSE]
    float *prob;    // [n]
    bool done;
    bool failed;    // the batch's forward failed (503)
    double t0;      // when it was queued
    struct pending *next;
} pending;

typedef struct server {
    run *R;
    const serve_options *x;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pending *head, *tail;
    int64_t queued;       // samples queued
    bool stop, closed;    // a signal asked to stop; the batcher has stopped taking requests
    dlrm_batch batch;
    // Counters (under mu).
    uint64_t by_code[6];  // 200, 400, 404, 405, 413, 503
    uint64_t samples, batches, batch_hist[BATCH_BUCKETS];
    double lat[LATENCY_RING]; // seconds from queueing to the answer, the last LATENCY_RING requests
    uint64_t nlat;
} server;

static const int CODES[6] = {200, 400, 404, 405, 413, 503};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void count_code(server *s, int code) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < 6; i++)
        if (CODES[i] == code) s->by_code[i]++;
    pthread_mutex_unlock(&s->mu);
}

// ---- responses ------------------------------------------------------------------------------------

static enum MHD_Result respond(struct MHD_Connection *c, server *s, int code, const char *type, const void *body,
                               size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)code, r);
    MHD_destroy_response(r);
    count_code(s, code);
    return ok;
}

// {"error": "..."} with the message escaped by cJSON.
static enum MHD_Result respond_error(struct MHD_Connection *c, server *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result respond_error(struct MHD_Connection *c, server *s, int code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o && cJSON_AddStringToObject(o, "error", msg)) text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    enum MHD_Result r;
    if (text) {
        r = respond(c, s, code, "application/json", text, strlen(text));
        cJSON_free(text);
    } else {
        r = respond(c, s, code, "text/plain", msg, strlen(msg));
    }
    return r;
}

// ---- parsing ---------------------------------------------------------------------------------------

// Checks id of feature f against its table's id space (rows, or any key for a hashed table).
static bool id_ok(const server *s, int32_t f, int64_t id) {
    const ember_table_config *t = &s->R->tables[f];
    return ember_table_id_space(t) == EMBER_IDS_HASHED || (id >= 0 && id < t->rows);
}

// A JSON body: {"samples": [{"dense": [13 numbers], "sparse": [26 ids]}, ...]} or one sample
// object. Fills p (allocated here); 0, or the HTTP status to refuse it with (400, 413) and the
// reason in err.
static int parse_json(server *s, const char *body, size_t len, pending *p, char *err, size_t cap) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) {
        snprintf(err, cap, "the body is not JSON (near byte %ld)",
                 cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - body) : 0L);
        return 400;
    }
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(root, "samples");
    const bool one = !samples && cJSON_GetObjectItemCaseSensitive(root, "dense");
    const int n = one ? 1 : cJSON_IsArray(samples) ? cJSON_GetArraySize(samples) : -1;
    int rc = 400;
    if (n < 1) {
        snprintf(err, cap, "expected {\"samples\": [{\"dense\": [%d numbers], \"sparse\": [%d ids]}, ...]} with at "
                 "least one sample", DLRM_NUM_DENSE, DLRM_NUM_SPARSE);
        goto out;
    }
    if (n > s->x->max_batch) {
        snprintf(err, cap, "%d samples: more than --max_batch %d", n, (int)s->x->max_batch);
        rc = 413;
        goto out;
    }
    p->n = n;
    p->dense = malloc(sizeof(float) * DLRM_NUM_DENSE * (size_t)n);
    p->ids = malloc(sizeof(int64_t) * DLRM_NUM_SPARSE * (size_t)n);
    p->prob = malloc(sizeof(float) * (size_t)n);
    if (!p->dense || !p->ids || !p->prob) {
        snprintf(err, cap, "out of memory for %d samples", n);
        rc = 503;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *smp = one ? root : cJSON_GetArrayItem(samples, i);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(smp, "dense"), *sp = cJSON_GetObjectItemCaseSensitive(smp, "sparse");
        if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) != DLRM_NUM_DENSE || !cJSON_IsArray(sp) ||
            cJSON_GetArraySize(sp) != DLRM_NUM_SPARSE) {
            snprintf(err, cap, "sample %d: expected \"dense\": [%d numbers] and \"sparse\": [%d ids]", i, DLRM_NUM_DENSE,
                     DLRM_NUM_SPARSE);
            goto out;
        }
        for (int j = 0; j < DLRM_NUM_DENSE; j++) {
            const cJSON *v = cJSON_GetArrayItem(d, j);
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > 3.0e38) {
                snprintf(err, cap, "sample %d: dense feature %d is not a finite number", i, j);
                goto out;
            }
            p->dense[(size_t)i * DLRM_NUM_DENSE + (size_t)j] = (float)v->valuedouble;
        }
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
            const cJSON *v = cJSON_GetArrayItem(sp, f);
            const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
            if (!(fabs(x) <= 9007199254740992.0) || x != floor(x)) {
                snprintf(err, cap, "sample %d: sparse feature %d is not an integer id (one id per feature)", i, f);
                goto out;
            }
            const int64_t id = (int64_t)x;
            if (!id_ok(s, f, id)) {
                snprintf(err, cap, "sample %d: sparse feature %d: id %lld outside its table %s's rows [0, %lld)", i, f,
                         (long long)id, s->R->tables[f].name, (long long)s->R->tables[f].rows);
                goto out;
            }
            p->ids[(size_t)i * DLRM_NUM_SPARSE + (size_t)f] = id;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

// A binary body: "EMB1", uint32 n, then n samples of 13 float32 and 26 int64 (little endian).
// Returns as parse_json.
static int parse_binary(server *s, const char *body, size_t len, pending *p, char *err, size_t cap) {
    const size_t per = 4 * DLRM_NUM_DENSE + 8 * DLRM_NUM_SPARSE;
    uint32_t n = 0;
    if (len < 8 || memcmp(body, BINARY_MAGIC, 4) != 0) {
        snprintf(err, cap, "a binary body starts with \"" BINARY_MAGIC "\" and a uint32 sample count");
        return 400;
    }
    memcpy(&n, body + 4, 4);
    if (n < 1 || len != 8 + per * n) {
        snprintf(err, cap, "binary body of %zu bytes for %u samples: expected 8 + %zu bytes per sample, at least one",
                 len, n, per);
        return 400;
    }
    if (n > (uint32_t)s->x->max_batch) {
        snprintf(err, cap, "%u samples: more than --max_batch %d", n, (int)s->x->max_batch);
        return 413;
    }
    p->n = (int32_t)n;
    p->dense = malloc(sizeof(float) * DLRM_NUM_DENSE * n);
    p->ids = malloc(sizeof(int64_t) * DLRM_NUM_SPARSE * n);
    p->prob = malloc(sizeof(float) * n);
    if (!p->dense || !p->ids || !p->prob) {
        snprintf(err, cap, "out of memory for %u samples", n);
        return 503;
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *b = body + 8 + per * i;
        memcpy(p->dense + (size_t)i * DLRM_NUM_DENSE, b, 4 * DLRM_NUM_DENSE);
        memcpy(p->ids + (size_t)i * DLRM_NUM_SPARSE, b + 4 * DLRM_NUM_DENSE, 8 * DLRM_NUM_SPARSE);
        for (int j = 0; j < DLRM_NUM_DENSE; j++)
            if (!isfinite(p->dense[(size_t)i * DLRM_NUM_DENSE + (size_t)j])) {
                snprintf(err, cap, "sample %u: dense feature %d is not finite", i, j);
                return 400;
            }
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
            const int64_t id = p->ids[(size_t)i * DLRM_NUM_SPARSE + (size_t)f];
            if (!id_ok(s, f, id)) {
                snprintf(err, cap, "sample %u: sparse feature %d: id %lld outside its table %s's rows [0, %lld)", i, f,
                         (long long)id, s->R->tables[f].name, (long long)s->R->tables[f].rows);
                return 400;
            }
        }
    }
    return 0;
}

static void pending_free(pending *p) {
    free(p->dense);
    free(p->ids);
    free(p->prob);
}

// ---- the handlers ------------------------------------------------------------------------------------

// A request body being received.
typedef struct upload {
    char *body;
    size_t len, cap;
    bool too_big;
} upload;

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    upload *u = *con_cls;
    if (u) free(u->body);
    free(u);
    *con_cls = NULL;
}

static enum MHD_Result metrics(struct MHD_Connection *c, server *s) {
    size_t cap = 8192, n = 0;
    char *t = malloc(cap);
    if (!t) return respond_error(c, s, 503, "out of memory");
    double lat[LATENCY_RING];
    pthread_mutex_lock(&s->mu);
    const uint64_t nl = s->nlat < LATENCY_RING ? s->nlat : LATENCY_RING;
    memcpy(lat, s->lat, sizeof(double) * nl);
    n += (size_t)snprintf(t + n, cap - n, "# HELP ember_requests_total Requests answered, by HTTP status.\n"
                                          "# TYPE ember_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        n += (size_t)snprintf(t + n, cap - n, "ember_requests_total{code=\"%d\"} %llu\n", CODES[i],
                              (unsigned long long)s->by_code[i]);
    n += (size_t)snprintf(t + n, cap - n,
                          "# HELP ember_samples_total Samples predicted.\n# TYPE ember_samples_total counter\n"
                          "ember_samples_total %llu\n# HELP ember_batch_size Samples per forward of the model.\n"
                          "# TYPE ember_batch_size histogram\n",
                          (unsigned long long)s->samples);
    uint64_t cum = 0;
    for (int b = 0; b < BATCH_BUCKETS - 1; b++) {
        cum += s->batch_hist[b];
        n += (size_t)snprintf(t + n, cap - n, "ember_batch_size_bucket{le=\"%d\"} %llu\n", 1 << b, (unsigned long long)cum);
    }
    cum += s->batch_hist[BATCH_BUCKETS - 1];
    n += (size_t)snprintf(t + n, cap - n,
                          "ember_batch_size_bucket{le=\"+Inf\"} %llu\nember_batch_size_sum %llu\n"
                          "ember_batch_size_count %llu\n# HELP ember_queue_samples Samples waiting for a batch.\n"
                          "# TYPE ember_queue_samples gauge\nember_queue_samples %lld\n",
                          (unsigned long long)cum, (unsigned long long)s->samples, (unsigned long long)s->batches,
                          (long long)s->queued);
    pthread_mutex_unlock(&s->mu);
    // Latency quantiles over the last requests (queued to answered, seconds).
    for (uint64_t i = 1; i < nl; i++)
        for (uint64_t j = i; j > 0 && lat[j - 1] > lat[j]; j--) {
            const double x = lat[j];
            lat[j] = lat[j - 1], lat[j - 1] = x;
        }
    n += (size_t)snprintf(t + n, cap - n, "# HELP ember_request_latency_seconds Queued to answered, over the last "
                                          "%d requests.\n# TYPE ember_request_latency_seconds summary\n", LATENCY_RING);
    static const double qs[4] = {0.5, 0.9, 0.99, 0.999};
    for (int k = 0; k < 4; k++) {
        const double v = nl ? lat[(uint64_t)(qs[k] * (double)(nl - 1) + 0.5)] : NAN;
        n += (size_t)snprintf(t + n, cap - n, "ember_request_latency_seconds{quantile=\"%g\"} %.9g\n", qs[k], v);
    }
    n += (size_t)snprintf(t + n, cap - n, "ember_request_latency_seconds_count %llu\n", (unsigned long long)nl);
    const enum MHD_Result r = respond(c, s, 200, "text/plain; version=0.0.4", t, n < cap ? n : cap - 1);
    free(t);
    return r;
}

// Queues p and waits for the batcher; false when the server no longer takes requests.
static bool predict(server *s, pending *p) {
    pthread_mutex_lock(&s->mu);
    if (s->closed || s->stop) {
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    p->t0 = now_s();
    if (s->tail) s->tail->next = p;
    else s->head = p;
    s->tail = p;
    s->queued += p->n;
    pthread_cond_signal(&s->work);
    while (!p->done) pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return true;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
    (void)version;
    server *s = cls;
    if (strcmp(url, "/health") == 0 || strcmp(url, "/metrics") == 0) {
        if (strcmp(method, "GET") != 0) return respond_error(c, s, 405, "%s takes GET", url);
        if (url[1] == 'm') return metrics(c, s);
        pthread_mutex_lock(&s->mu);
        const bool up = !s->stop && !s->closed;
        pthread_mutex_unlock(&s->mu);
        char body[512];
        const int n = snprintf(body, sizeof body, "{\"status\": \"%s\", \"step\": %lld}\n", up ? "ok" : "stopping",
                               (long long)s->R->ckpt.pos.steps);
        return respond(c, s, up ? 200 : 503, "application/json", body, (size_t)n);
    }
    if (strcmp(url, "/predict") != 0) return respond_error(c, s, 404, "no such path '%s': POST /predict, GET /health, GET /metrics", url);
    if (strcmp(method, "POST") != 0) return respond_error(c, s, 405, "/predict takes POST");
    upload *u = *con_cls;
    if (!u) {
        if (!(u = calloc(1, sizeof *u))) return MHD_NO;
        *con_cls = u;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        const size_t k = *upload_data_size;
        *upload_data_size = 0;
        if (u->too_big || u->len + k > (size_t)s->x->max_body_bytes) {
            u->too_big = true; // keep reading (and dropping) so the answer reaches the client
            return MHD_YES;
        }
        if (u->len + k + 1 > u->cap) {
            size_t cap = u->cap ? u->cap : 4096;
            while (cap < u->len + k + 1) cap *= 2;
            char *b = realloc(u->body, cap);
            if (!b) return MHD_NO;
            u->body = b, u->cap = cap;
        }
        memcpy(u->body + u->len, upload_data, k);
        u->len += k;
        return MHD_YES;
    }
    if (u->too_big)
        return respond_error(c, s, 413, "the body is larger than --max_body_bytes %zu", (size_t)s->x->max_body_bytes);
    const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    const bool binary = type && strncmp(type, "application/octet-stream", 24) == 0;
    pending p = {0};
    char err[512];
    const int refused = (binary ? parse_binary : parse_json)(s, u->body ? u->body : "", u->len, &p, err, sizeof err);
    if (refused) {
        pending_free(&p);
        return respond_error(c, s, refused, "%s", err);
    }
    enum MHD_Result r;
    if (!predict(s, &p)) {
        r = respond_error(c, s, 503, "the server is shutting down");
    } else if (p.failed) {
        r = respond_error(c, s, 503, "the model failed on this batch");
    } else if (binary) {
        r = respond(c, s, 200, "application/octet-stream", p.prob, sizeof(float) * (size_t)p.n);
    } else {
        size_t cap = 32 + 20 * (size_t)p.n, n = 0;
        char *t = malloc(cap);
        if (!t) {
            pending_free(&p);
            return respond_error(c, s, 503, "out of memory");
        }
        n += (size_t)snprintf(t + n, cap - n, "{\"probabilities\": [");
        for (int32_t i = 0; i < p.n; i++) n += (size_t)snprintf(t + n, cap - n, "%s%.9g", i ? ", " : "", (double)p.prob[i]);
        n += (size_t)snprintf(t + n, cap - n, "]}\n");
        r = respond(c, s, 200, "application/json", t, n);
        free(t);
    }
    pending_free(&p);
    return r;
}

// ---- the batcher ----------------------------------------------------------------------------------------

// One forward over the taken requests; each gets its probabilities (sigmoid of the logit, in
// double, rounded to float).
static void run_batch(server *s, pending *take) {
    dlrm_batch *b = &s->batch;
    int32_t n = 0;
    for (pending *p = take; p; p = p->next) {
        memcpy(b->dense + (size_t)n * DLRM_NUM_DENSE, p->dense, sizeof(float) * DLRM_NUM_DENSE * (size_t)p->n);
        memcpy(b->ids + (size_t)n * DLRM_NUM_SPARSE, p->ids, sizeof(int64_t) * DLRM_NUM_SPARSE * (size_t)p->n);
        n += p->n;
    }
    b->size = n;
    b->has_bags = false;
    const float *logits = NULL;
    const ember_status st = dlrm_forward(s->R->model, b, &logits);
    int32_t k = 0;
    for (pending *p = take; p; p = p->next) {
        p->failed = st != EMBER_OK;
        for (int32_t i = 0; i < p->n && !p->failed; i++) p->prob[i] = (float)(1.0 / (1.0 + exp(-(double)logits[k + i])));
        k += p->n;
    }
    if (st != EMBER_OK) ember_ctx_clear_error(s->R->ctx);
}

static void *signal_thread(void *arg) {
    server *s = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void batcher(server *s) {
    const double wait = (double)s->x->max_wait_us * 1e-6;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        if (!s->head) break; // stopping, nothing queued
        // Wait for more samples, up to max_wait_us after the first request was queued.
        const double deadline = s->head->t0 + wait;
        while (!s->stop && s->queued < s->x->max_batch) {
            const double t = now_s();
            if (t >= deadline) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            const double until = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + (deadline - t);
            ts.tv_sec = (time_t)until;
            ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&s->work, &s->mu, &ts);
        }
        // Take whole requests, in order, up to max_batch samples (one request never exceeds it).
        pending *take = s->head, *last = NULL;
        int64_t n = 0;
        for (pending *p = s->head; p && n + p->n <= s->x->max_batch; p = p->next) last = p, n += p->n;
        s->head = last->next;
        if (!s->head) s->tail = NULL;
        last->next = NULL;
        s->queued -= n;
        pthread_mutex_unlock(&s->mu);
        run_batch(s, take);
        pthread_mutex_lock(&s->mu);
        const double t = now_s();
        int bucket = 0;
        while (bucket < BATCH_BUCKETS - 1 && (1 << bucket) < n) bucket++;
        s->batch_hist[bucket]++;
        s->batches++;
        s->samples += (uint64_t)n;
        for (pending *p = take, *next; p; p = next) {
            next = p->next;
            s->lat[s->nlat++ % LATENCY_RING] = t - p->t0;
            p->done = true;
        }
        pthread_cond_broadcast(&s->done);
    }
    s->closed = true;
    pthread_mutex_unlock(&s->mu);
}

ember_status run_serve(run *R) {
    const serve_options *x = R->serve_to;
    APP_CHECK(R->ctx, R->world == 1, EMBER_ERR_UNSUPPORTED,
              "ember serve runs as one process (it was started on %d ranks): start several behind a load balancer "
              "to serve more", (int)R->world);
    server s = {.R = R, .x = x};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.work, NULL);
    pthread_cond_init(&s.done, NULL);
    ember_status st = dlrm_batch_create(R->ctx, (int32_t)x->max_batch, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &s.batch);
    // SIGINT and SIGTERM go to the signal thread alone: every other thread blocks them (cmd_serve
    // blocked them before any thread started; the server's threads inherit this mask).
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_t sig;
    const bool have_sig = st == EMBER_OK && pthread_create(&sig, NULL, signal_thread, &s) == 0;
    if (st == EMBER_OK && !have_sig) st = ember_ctx_set_error(R->ctx, EMBER_ERR_NOMEM, "cannot start a thread");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->port)};
    if (st == EMBER_OK && inet_pton(AF_INET, x->host, &addr.sin_addr) != 1)
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_INVALID_ARG, "--host '%s': not an IPv4 address", x->host);
    struct MHD_Daemon *d = NULL;
    if (st == EMBER_OK) {
        d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, 0, NULL,
                             NULL, answer, &s, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&addr,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, &s, MHD_OPTION_CONNECTION_LIMIT,
                             (unsigned)x->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
        if (!d)
            st = ember_ctx_set_error(R->ctx, EMBER_ERR_IO, "cannot listen on %s:%d: %s", x->host, (int)x->port,
                                     errno ? strerror(errno) : "the HTTP server did not start");
    }
    if (st == EMBER_OK) {
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        if (R->rep.out) {
            fprintf(R->rep.out,
                    "serving '%s' (DLRM after %lld steps) on http://%s:%d: POST /predict, GET /health, GET /metrics; "
                    "max batch %lld samples, max wait %lld us\n",
                    R->ckpt_path, (long long)R->ckpt.pos.steps, x->host, info ? (int)info->port : (int)x->port,
                    (long long)x->max_batch, (long long)x->max_wait_us);
            fflush(R->rep.out);
        }
        batcher(&s);
        // Stopping: no new connection; requests still arriving are told 503; then every
        // connection's thread ends.
        MHD_quiesce_daemon(d);
        MHD_stop_daemon(d);
        if (R->rep.out) {
            fprintf(R->rep.out, "stopped: %llu requests answered, %llu samples in %llu batches\n",
                    (unsigned long long)(s.by_code[0] + s.by_code[1] + s.by_code[2] + s.by_code[3] + s.by_code[4] +
                                         s.by_code[5]),
                    (unsigned long long)s.samples, (unsigned long long)s.batches);
            fflush(R->rep.out);
        }
    }
    if (have_sig) {
        pthread_kill(sig, SIGTERM); // ends its sigwait when no signal came
        pthread_join(sig, NULL);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    dlrm_batch_destroy(R->ctx, &s.batch);
    pthread_cond_destroy(&s.work);
    pthread_cond_destroy(&s.done);
    pthread_mutex_destroy(&s.mu);
    return st;
}
