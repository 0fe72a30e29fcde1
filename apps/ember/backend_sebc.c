// The DLRM backend on the library's sharded EmbeddingBagCollection.
#include <string.h>

#include "backend.h"
#include "appctx.h"

typedef struct sebc_backend {
    ember_comm *comm; // borrowed
    ember_sebc *sebc;
    ember_grad_convention conv;
    double busy_s;    // busy_seconds: time in the embedding calls less their waits
} sebc_backend;

// Brackets an embedding call for busy_seconds: the clock and the communicator's wait before it.
typedef struct busy_mark {
    double t, w;
} busy_mark;
static busy_mark busy_begin(const sebc_backend *b) { return (busy_mark){app_now_s(), ember_comm_wait_seconds(b->comm)}; }
static ember_status busy_end(sebc_backend *b, busy_mark m, ember_status st) {
    b->busy_s += (app_now_s() - m.t) - (ember_comm_wait_seconds(b->comm) - m.w);
    return st;
}

static ember_status forward(void *impl, const ember_kjt *kjt, float *out) {
    sebc_backend *b = impl;
    const busy_mark m = busy_begin(b);
    return busy_end(b, m, ember_sebc_forward(b->sebc, kjt, out));
}

static ember_status backward(void *impl, const ember_kjt *kjt, const float *grad_out) {
    sebc_backend *b = impl;
    const busy_mark m = busy_begin(b);
    return busy_end(b, m, ember_sebc_backward(b->sebc, kjt, grad_out));
}

static ember_status prefetch(void *impl, const ember_kjt *next_kjt) {
    sebc_backend *b = impl;
    const busy_mark m = busy_begin(b);
    return busy_end(b, m, ember_sebc_prefetch(b->sebc, next_kjt));
}

static ember_status backward_start(void *impl, const ember_kjt *kjt, const float *grad_out) {
    sebc_backend *b = impl;
    const busy_mark m = busy_begin(b);
    return busy_end(b, m, ember_sebc_backward_start(b->sebc, kjt, grad_out));
}

static ember_status backward_finish(void *impl) {
    sebc_backend *b = impl;
    const busy_mark m = busy_begin(b);
    return busy_end(b, m, ember_sebc_backward_finish(b->sebc));
}

static double busy_seconds(void *impl, int reset) {
    sebc_backend *b = impl;
    const double s = b->busy_s;
    if (reset) b->busy_s = 0;
    return s;
}

static ember_status reshard(void *impl, const ember_table_plan *plan, ember_reshard_stats *stats) {
    return ember_sebc_reshard(((sebc_backend *)impl)->sebc, plan, 0, stats);
}

static void progress(void *impl) { (void)ember_comm_progress(((sebc_backend *)impl)->comm); }

static ember_status tier_stats(void *impl, int32_t table, ember_tier_stats *out) {
    return ember_sebc_tier_stats(((sebc_backend *)impl)->sebc, table, out);
}

static ember_status reduce_dense_grads(void *impl, float *grad, size_t n) {
    sebc_backend *b = impl;
    return ember_comm_allreduce_grads(b->comm, b->conv, grad, n);
}

static ember_status read(void *impl, int32_t table, const char *tensor, ember_dtype dtype, void *dst) {
    return ember_sebc_read_as(((sebc_backend *)impl)->sebc, table, tensor, dtype, dst, 0);
}

static ember_status save(void *impl, const char *dir, const ember_checkpoint_options *opts) {
    return ember_checkpoint_save(((sebc_backend *)impl)->sebc, dir, opts);
}

static ember_status load(void *impl, const char *dir) {
    return ember_checkpoint_load(((sebc_backend *)impl)->sebc, dir, NULL);
}

static ember_status set_training(void *impl, int training) {
    return ember_sebc_set_training(((sebc_backend *)impl)->sebc, training);
}

static ember_status set_wire(void *impl, ember_dtype forward, ember_dtype backward, float forward_scale,
                             float backward_scale) {
    ember_sebc *s = ((sebc_backend *)impl)->sebc;
    const ember_status st = ember_sebc_set_wire_precision(s, forward, backward);
    return st != EMBER_OK ? st : ember_sebc_set_wire_loss_scale(s, forward_scale, backward_scale);
}

static void destroy(void *impl) {
    sebc_backend *b = impl;
    if (!b) return;
    ember_sebc_destroy(b->sebc);
    ember_ctx_free(ember_comm_ctx(b->comm), b);
}

ember_status dlrm_backend_sebc_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                      ember_grad_convention conv, int32_t group_size, dlrm_backend *out) {
    memset(out, 0, sizeof *out);
    ember_ctx *ctx = ember_comm_ctx(comm);
    sebc_backend *b = app_alloc(ctx, sizeof *b, "embedding backend");
    ember_status st = ember_comm_agree(comm, b ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, b);
        return st;
    }
    b->comm = comm;
    b->conv = conv;
    st = group_size > 0 ? ember_sebc_create_2d(comm, cfg, plan, conv, group_size, &b->sebc)
                        : ember_sebc_create(comm, cfg, plan, conv, &b->sebc);
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, b);
        return st;
    }
    out->impl = b;
    out->forward = forward;
    out->backward = backward;
    out->reduce_dense_grads = reduce_dense_grads;
    out->read = read;
    out->save = save;
    out->load = load;
    out->set_wire = set_wire;
    out->set_training = set_training;
    out->destroy = destroy;
    out->prefetch = prefetch;
    out->backward_start = backward_start;
    out->backward_finish = backward_finish;
    out->progress = progress;
    out->tier_stats = tier_stats;
    out->busy_seconds = busy_seconds;
    out->reshard = reshard;
    return EMBER_OK;
}
