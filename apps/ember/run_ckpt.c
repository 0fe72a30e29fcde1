// The DLRM driver's checkpoints (run.h): saving the run into its save directory, finding and
// reading the checkpoint to resume from (or to evaluate), loading it into the model.
#include <string.h>

#include "appctx.h"
#include "run.h"

// The tables go through the backend (include/ember/state.h) with trainer.json and the dense blobs
// (trainstate.h) beside them; then the checkpoints beyond --keep_checkpoints are removed. A delta
// goes into the newest full checkpoint of this run (its directory keeps its name; trainer.json in
// it says the step it now holds) and prunes nothing.
// next_batch: the data position after `step` (the source's own may be one batch ahead).
ember_status run_save_checkpoint(run *R, int32_t epoch, int64_t step, int64_t samples, int64_t next_batch,
                                 bool delta) {
    const double t0 = app_now_s();
    char path[TRAINSTATE_PATH_MAX + 32];
    ember_status st = EMBER_OK;
    delta = delta && R->delta_dir[0];
    if (delta) {
        snprintf(path, sizeof path, "%s", R->delta_dir);
    } else if (!ckpt_step_path(R->save_dir, step, path, sizeof path)) {
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_INVALID_ARG, "--save_dir '%s': path too long", R->save_dir);
    }
    // The blobs must be the same on every rank: rank 0's eval digest goes to all.
    uint64_t outputs = R->ev.digest;
    if (st == EMBER_OK) st = ember_comm_bcast(R->comm, &outputs, sizeof outputs, 0);
    trainstate ts = {.cfg = *R->o,
                     .world_size = R->world,
                     .num_dense_params = dlrm_num_dense_params(R->model),
                     .pos = {.epoch = epoch, .next_batch = next_batch, .steps = step, .samples = samples,
                             .skipped_batches = R->skipped_batches},
                     .dense_step = dlrm_dense_optim(R->model)->step,
                     .digest_losses = R->digest_losses,
                     .digest_outputs = outputs};
    char *json = NULL;
    void *scratch = NULL;
    ember_checkpoint_blob blobs[4];
    int32_t n = 0;
    if (st == EMBER_OK) st = trainstate_encode(R->ctx, &ts, &json);
    if (st == EMBER_OK) {
        blobs[0] = (ember_checkpoint_blob){.name = TRAINSTATE_BLOB, .data = json, .bytes = strlen(json)};
        st = trainstate_dense_blobs(R->ctx, R->model, blobs + 1, &n, &scratch);
    }
    st = ember_comm_agree(R->comm, st);
    // Rank 0 makes the step directory, so that a failed save removes what it made and never a
    // directory that was there (a checkpoint of this step, committed by an earlier run).
    bool made = false;
    if (st == EMBER_OK && !delta)
        st = ember_comm_agree(R->comm, R->rank == 0 ? ckpt_make_step_dir(R->ctx, path, &made) : EMBER_OK);
    if (st == EMBER_OK) {
        ember_checkpoint_options opts = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
        opts.blobs = blobs;
        opts.num_blobs = 1 + n;
        opts.delta = delta;
        st = R->backend.save(R->backend.impl, path, &opts);
        // The save returns the same status on every rank, each having removed its own unfinished
        // file; rank 0 removes the rest (a file another rank is still removing is no matter).
        if (st != EMBER_OK && made) ckpt_discard_step_dir(path);
    }
    trainstate_text_free(json);
    ember_ctx_free(R->ctx, scratch);
    int32_t removed = 0;
    if (st == EMBER_OK && !delta) {
        snprintf(R->delta_dir, sizeof R->delta_dir, "%s", path);
        ember_status pruned = R->rank == 0 ? ckpt_prune(R->ctx, R->save_dir, step, R->o->keep_checkpoints, &removed)
                                           : EMBER_OK;
        st = ember_comm_agree(R->comm, pruned);
    }
    if (st == EMBER_OK) report_checkpoint(R, path, delta, app_now_s() - t0, removed);
    return st;
}

ember_status run_open_checkpoint(run *R, const char *flag, const char *dir) {
    struct {
        char path[TRAINSTATE_PATH_MAX], save_dir[TRAINSTATE_PATH_MAX];
    } *where = app_calloc(R->ctx, sizeof *where, "checkpoint path");
    ember_status st = where ? EMBER_OK : EMBER_ERR_NOMEM;
    if (st == EMBER_OK && R->rank == 0) st = ckpt_resolve(R->ctx, flag, dir, where->path, where->save_dir);
    st = ember_comm_agree(R->comm, st);
    if (st == EMBER_OK) st = ember_comm_bcast(R->comm, where, sizeof *where, 0);
    if (st == EMBER_OK) {
        memcpy(R->ckpt_path, where->path, sizeof R->ckpt_path);
        memcpy(R->ckpt_save_dir, where->save_dir, sizeof R->ckpt_save_dir);
        // A serving bundle (ember export) holds the trainer's configuration too; only ember eval
        // takes one (it has no optimizer state to resume from). Rank 0 looked: every rank agrees.
        int bundle = R->rank == 0 && saved_is_bundle(R->ckpt_path);
        st = ember_comm_bcast(R->comm, &bundle, sizeof bundle, 0);
        R->bundle = bundle != 0;
        if (st == EMBER_OK && R->bundle) {
            if (!R->eval_only)
                st = ember_ctx_set_error(R->ctx, EMBER_ERR_INVALID_ARG, "%s '%s' is a serving bundle (ember export): "
                                         "it holds no optimizer state to train from; resume from the checkpoint it "
                                         "was exported from", flag, R->ckpt_path);
            const saved_model sm = {.bundle = R->ckpt_path};
            if (st == EMBER_OK) st = trainstate_read(R->ctx, &sm, R->ckpt_path, &R->ckpt);
            R->ckpt_world = 1;
            st = ember_comm_agree(R->comm, st);
        } else if (st == EMBER_OK) {
            ember_checkpoint *c = NULL;
            st = ember_checkpoint_open(R->ctx, R->ckpt_path, &c);
            if (st == EMBER_OK) {
                R->ckpt_generation = ember_checkpoint_generation(c);
                R->ckpt_world = ember_checkpoint_world_size(c);
                const saved_model sm = {.ckpt = c};
                st = trainstate_read(R->ctx, &sm, R->ckpt_path, &R->ckpt);
            }
            ember_checkpoint_close(c);
            st = ember_comm_agree(R->comm, st);
        }
    }
    ember_ctx_free(R->ctx, where);
    if (st == EMBER_OK) {
        R->resumed = true;
        R->start = R->ckpt.pos;
    }
    return st;
}

ember_status run_restore(run *R) {
    APP_TRY(R->backend.load(R->backend.impl, R->ckpt_path));
    const char *flag = R->eval_only ? "--load" : "--resume";
    ember_status st = EMBER_OK;
    if (R->bundle) {
        const saved_model sm = {.bundle = R->ckpt_path};
        st = trainstate_read_dense(R->ctx, &sm, flag, R->ckpt_path, R->model, R->ckpt.dense_step);
    } else {
        ember_checkpoint *c = NULL;
        st = ember_checkpoint_open(R->ctx, R->ckpt_path, &c);
        const saved_model sm = {.ckpt = c};
        if (st == EMBER_OK) st = trainstate_read_dense(R->ctx, &sm, flag, R->ckpt_path, R->model, R->ckpt.dense_step);
        ember_checkpoint_close(c);
    }
    APP_TRY(ember_comm_agree(R->comm, st));
    R->digest_losses = R->ckpt.digest_losses;
    if (!R->eval_only) R->ev.digest = R->ckpt.digest_outputs;
    return EMBER_OK;
}
