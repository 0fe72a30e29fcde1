// The batch in flight (ember__batch): one struct for everything one batch's input holds, so a
// prefetch fills a second one and the forward that takes it swaps a pointer (overlap.c).
#include "shard/internal.h"

ember_status ember__batch_create(ember_sebc *s, ember__batch **out) {
    ember__batch *b = ember__calloc(s->ctx, sizeof *b);
    *out = b;
    if (!b) return EMBER_ERR_NOMEM;
    b->Bs = ember__calloc(s->ctx, sizeof(int64_t) * (size_t)s->W);
    b->send_ids = ember__calloc(s->ctx, sizeof(int64_t) * (size_t)s->W);
    b->recv_ids = ember__calloc(s->ctx, sizeof(int64_t) * (size_t)s->W);
    return b->Bs && b->send_ids && b->recv_ids ? EMBER_OK : EMBER_ERR_NOMEM;
}

void ember__batch_destroy(ember_sebc *s, ember__batch *b) {
    if (!b) return;
    ember__buf *bufs[] = {&b->san_off, &b->san_val, &b->san_w,   &b->san_pos, &b->san_blk, &b->snd_len, &b->snd_val,
                          &b->snd_w,   &b->snd_pos, &b->snd_cur, &b->rcv_len, &b->rcv_val, &b->rcv_w};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember__buf_free(s->ctx, bufs[i]);
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (b->home[k]) ember__schemes[k]->home_batch_free(s, b->home[k]);
    ember__free(s->ctx, b->Bs);
    ember__free(s->ctx, b->send_ids);
    ember__free(s->ctx, b->recv_ids);
    ember__free(s->ctx, b);
}
