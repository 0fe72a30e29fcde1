// The DLRM driver before the model exists (run.h): the options checked, the tables configured and
// placed, the memory they need checked against each host's, the data opened and scanned.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "appctx.h"
#include "ember/plan.h"
#include "metrics.h"
#include "planfile.h"
#include "run.h"
#include "sharding.h"
#include "threads.h"

dlrm_config run_model_config(const train_options *o, int64_t max_local) {
    dlrm_config c = {
        .num_dense = DLRM_NUM_DENSE,
        .num_sparse = DLRM_NUM_SPARSE,
        .embedding_dim = o->embedding_dim,
        .bottom_sizes = o->bottom,
        .num_bottom = o->num_bottom,
        .top_sizes = o->top,
        .num_top = o->num_top,
        .interaction = o->interaction,
        .dcn_num_layers = o->dcn_num_layers,
        .dcn_low_rank_dim = o->dcn_low_rank_dim,
        .hot_sizes = o->multi_hot,
        .rows = o->rows,
        .hot_dist = o->multi_hot_dist,
        .dedup = o->dedup_features,
        .max_batch = max_local > INT32_MAX ? INT32_MAX : (int32_t)max_local,
        .seed = o->seed,
        .optim = {.kind = o->dense_optimizer, .lr = o->learning_rate},
    };
    return c;
}

ember_status run_validate_options(ember_ctx *ctx, const train_options *o, int32_t world) {
    APP_CHECK(ctx, o->batch_size >= world, EMBER_ERR_INVALID_ARG,
              "--batch_size %lld is smaller than the %d ranks: every rank needs a sample of each global batch",
              (long long)o->batch_size, (int)world);
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        APP_CHECK(ctx, o->rows[f] >= 1 && o->rows[f] <= ((int64_t)1 << 48), EMBER_ERR_INVALID_ARG,
                  "--num_embeddings_per_feature: feature cat_%d has %lld rows, expected 1..2^48", f,
                  (long long)o->rows[f]);
    }
    APP_CHECK(ctx, o->epochs >= 1, EMBER_ERR_INVALID_ARG, "--epochs %d: expected >= 1", (int)o->epochs);
    APP_CHECK(ctx, o->limit_train_batches >= 0 && o->limit_val_batches >= 0 && o->eval_interval >= 0,
              EMBER_ERR_INVALID_ARG, "--limit_train_batches, --limit_val_batches and --eval_interval must be >= 0");
    APP_CHECK(ctx, isfinite(o->learning_rate) && o->learning_rate > 0.0f, EMBER_ERR_INVALID_ARG,
              "--learning_rate %g: expected a positive number", (double)o->learning_rate);
    APP_CHECK(ctx, isfinite(o->embedding_learning_rate) && o->embedding_learning_rate >= 0.0f,
              EMBER_ERR_INVALID_ARG, "--embedding_learning_rate %g: expected a positive number",
              (double)o->embedding_learning_rate);
    if (o->dataset == TRAIN_SYNTHETIC) {
        APP_CHECK(ctx, o->limit_train_batches >= 1 && o->limit_val_batches >= 1, EMBER_ERR_INVALID_ARG,
                  "--dataset synthetic: --limit_train_batches and --limit_val_batches set the sizes of the "
                  "generated sets and must be >= 1");
        APP_CHECK(ctx, isfinite(o->zipf_alpha) && o->zipf_alpha >= 0.0, EMBER_ERR_INVALID_ARG,
                  "--zipf_alpha %g: expected a number >= 0", o->zipf_alpha);
    } else if (o->dataset == TRAIN_CRITEO_NPY) {
        APP_CHECK(ctx, o->data_dir != NULL, EMBER_ERR_INVALID_ARG,
                  "--dataset criteo_npy needs --data_dir DIR (TorchRec's day_{d}_dense/sparse/labels.npy files)");
    } else {
        APP_CHECK(ctx, o->data_path != NULL, EMBER_ERR_INVALID_ARG, "--dataset criteo needs --data_path FILE");
        APP_CHECK(ctx, o->eval_data_path != NULL || o->limit_val_batches >= 1, EMBER_ERR_INVALID_ARG,
                  "--dataset criteo without --eval_data_path holds out the first --limit_val_batches global "
                  "batches of --data_path for evaluation: give --limit_val_batches N >= 1");
    }
    APP_CHECK(ctx, isfinite(o->target_auc) && o->target_auc >= 0.0 && o->target_auc <= 1.0, EMBER_ERR_INVALID_ARG,
              "--target_auc %g: expected an AUC in (0, 1] (0: none)", o->target_auc);
    if (o->metrics_path) {
        metrics_format fmt;
        APP_TRY(metrics_format_of(ctx, o->metrics_path, &fmt));
    }
    if (o->plot_path) APP_TRY(plot_check_gnuplot(ctx));
    APP_CHECK(ctx, o->checkpoint_interval >= 0, EMBER_ERR_INVALID_ARG, "--checkpoint_interval %lld: expected >= 0",
              (long long)o->checkpoint_interval);
    APP_CHECK(ctx, o->keep_checkpoints >= 1, EMBER_ERR_INVALID_ARG, "--keep_checkpoints %d: expected >= 1",
              (int)o->keep_checkpoints);
    APP_CHECK(ctx, o->checkpoint_delta_interval >= 0, EMBER_ERR_INVALID_ARG,
              "--checkpoint_delta_interval %lld: expected >= 0", (long long)o->checkpoint_delta_interval);
    bool multi_hot = false;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) multi_hot = multi_hot || o->multi_hot[f] != 1;
    APP_CHECK(ctx, !(multi_hot && o->collisionless), EMBER_ERR_INVALID_ARG,
              "--multi_hot_sizes draws its extra ids from each table's rows; --hash collisionless tables have "
              "none to draw from (use --hash modulo)");
    dlrm_config mc = run_model_config(o, (o->batch_size + world - 1) / world);
    return dlrm_validate(ctx, &mc);
}


void run_setup_tables(run *R) {
    const train_options *o = R->o;
    const float lr = o->embedding_learning_rate > 0.0f ? o->embedding_learning_rate : o->learning_rate;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        snprintf(R->feature_names[f], sizeof R->feature_names[f], "cat_%d", f);
        sharding_table_name(f, R->table_names[f], sizeof R->table_names[f]);
        ember_optim_config opt = EMBER_OPTIM_CONFIG_DEFAULT;
        opt.kind = o->embedding_optimizer;
        opt.lr = lr;
        // TorchRec's default embedding initialisation: uniform in +-sqrt(1 / rows).
        float bound = (float)sqrt(1.0 / (double)o->rows[f]);
        R->tables[f] = (ember_table_config){.name = R->table_names[f],
                                            .rows = o->rows[f],
                                            .dim = o->embedding_dim,
                                            .pooling = EMBER_POOL_SUM,
                                            .dtype = EMBER_DTYPE_F32,
                                            .init = {EMBER_INIT_UNIFORM, -bound, bound, 0.0f},
                                            .optim = opt};
        if (o->ssd_tables & (1u << f)) {
            R->tables[f].cache_rows = o->cache_rows;
            R->tables[f].cache_policy = o->cache_policy;
        }
        if (o->collisionless) {
            // A capacity of whole buckets (the size rounded up) holding the raw ids.
            R->tables[f].hash = o->hash;
            const int64_t br = o->hash.bucket_rows > 0 ? o->hash.bucket_rows : EMBER_HASH_BUCKET_ROWS;
            R->tables[f].rows = (o->rows[f] + br - 1) / br * br;
        }
        R->features[f] = (ember_feature_config){.name = R->feature_names[f], .table = f};
    }
}

// Bytes this rank needs for the model: its table shards with optimizer state, the dense part
// (parameters, gradients, optimizer state, activations) roughly, and the batch buffers.
static double bytes_needed(const run *R, int32_t *largest) {
    const train_options *o = R->o;
    double total = 0.0, big = -1.0;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        size_t w = 0, st = 0;
        // The plan was validated by the planner or the plan-file check: a refusal here counts 0.
        const int32_t W = R->group ? R->group : R->world; // 2D: the plan is a group's
        if (ember_shard_rank_bytes(R->ctx, &R->tables[f], &R->plan[f], W, R->rank % W, &w, &st) != EMBER_OK)
            w = st = 0;
        const double b = (double)w + (double)st;
        total += b;
        if (b > big) {
            big = b;
            *largest = f;
        }
    }
    const dlrm_config mc = run_model_config(o, R->max_local);
    const double inter = (double)dlrm_interaction_width(&mc);
    double widths = inter * 2.0 + DLRM_NUM_SPARSE * (double)o->embedding_dim * 3.0;
    if (o->interaction == DLRM_INTERACTION_DCN) // the cross net's x_0..x_L, t_l, u_l and backward scratch
        widths += inter * (2.0 * o->dcn_num_layers + 3.0) + (o->dcn_num_layers + 1.0) * o->dcn_low_rank_dim;
    else // the dot interaction's T
        widths += (DLRM_NUM_SPARSE + 1.0) * (double)o->embedding_dim;
    for (int l = 0; l < o->num_bottom; l++) widths += 2.0 * o->bottom[l];
    for (int l = 0; l < o->num_top; l++) widths += 2.0 * o->top[l];
    // The batch buffers: the step's two, each source loader's ring (--prefetch_batches) and the
    // generated batches (--num_generated_batches).
    const double sample = sizeof(float) * (DLRM_NUM_DENSE + 2.0) + sizeof(int64_t) * (DLRM_NUM_SPARSE + 1.0);
    const double batches = 2.0 + 2.0 * (double)o->prefetch_batches + (double)o->num_generated_batches;
    // The model's KJT values, this step's and the prefetched one's: every id of every bag.
    double hot = 0.0;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) hot += o->multi_hot[f];
    return total + 4.0 * (double)R->max_local * widths + batches * (double)R->max_local * sample +
           2.0 * sizeof(int64_t) * hot * (double)R->max_local;
}

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
static double mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0.0;
    char line[256];
    double kb = 0.0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "MemAvailable:", 13) == 0) {
            kb = strtod(line + 13, NULL);
            break;
        }
    }
    fclose(f);
    return kb * 1024.0;
}

// Through the library's collectives, so under the watchdog: every rank learns every rank's host
// (its first rank) and bytes, and sums its own host's.
ember_status run_check_memory(run *R) {
    int32_t largest = 0;
    double mine = bytes_needed(R, &largest), host = 0.0;
    ember_ctx *ctx = R->ctx;
    int64_t *hosts = app_alloc(ctx, sizeof(int64_t) * 2 * (size_t)R->world, "memory check");
    ember_status st = ember_comm_agree(R->comm, hosts ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(R->comm, R->node_leader, hosts);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(R->comm, (int64_t)mine, hosts + R->world);
    for (int32_t r = 0; st == EMBER_OK && r < R->world; r++)
        if (hosts[r] == R->node_leader) host += (double)hosts[R->world + r];
    ember_ctx_free(ctx, hosts);
    if (st != EMBER_OK) return st;
    double avail = mem_available();
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (st == EMBER_OK && avail > 0.0 && host > avail) {
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_NOMEM,
                                 "the model needs %.1f GiB on this host (%.1f GiB on this rank, most for table %s: "
                                 "%lld rows x %d, %s) but %.1f GiB is available: smaller "
                                 "--num_embeddings_per_feature, or more hosts",
                                 host / gib, mine / gib, R->table_names[largest], (long long)R->tables[largest].rows,
                                 (int)R->o->embedding_dim, sharding_name(R->plan[largest].scheme), avail / gib);
    }
    return ember_comm_agree(R->comm, st);
}

ember_status run_open_data(run *R) {
    const train_options *o = R->o;
    const source common = {.global_batch = o->batch_size, .rank = R->rank, .world = R->world};
    R->train = common;
    R->train.limit = o->limit_train_batches;
    R->eval = common;
    R->eval.limit = o->limit_val_batches;
    R->eval.split = 1;
    if (o->dataset == TRAIN_SYNTHETIC) {
        // --synth_items K: K items per table row, each a 64-bit key (raw for collisionless tables,
        // else modulo the table's rows); K = 1 and modulo: the items are the rows, as always.
        int64_t items[DLRM_NUM_SPARSE];
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) items[f] = o->rows[f] * o->synth_items;
        const bool keys = o->synth_items > 1 || o->collisionless;
        synth_config sc = {.seed = o->seed,
                           .num_dense = DLRM_NUM_DENSE,
                           .num_sparse = DLRM_NUM_SPARSE,
                           .rows = items,
                           .table_rows = keys ? o->rows : NULL,
                           .raw_keys = o->collisionless,
                           .zipf_alpha = o->zipf_alpha,
                           .dense_scale = SYNTH_DENSE_SCALE,
                           .sparse_scale = SYNTH_SPARSE_SCALE,
                           .bias = SYNTH_BIAS,
                           .request_size = o->request_size,
                           .user_features = o->user_features};
        APP_TRY(synth_create(R->ctx, &sc, &R->syn));
        R->train.syn = R->eval.syn = R->syn;
    } else if (o->dataset == TRAIN_CRITEO_NPY) {
        // Days [0, train_days) train; day train_days evaluates, its first half (val) or second (test).
        const int32_t last = criteo_npy_last_day(o->data_dir);
        APP_CHECK(R->ctx, last >= 0, EMBER_ERR_IO, "--data_dir '%s': no day_0_dense.npy there (TorchRec's day files)",
                  o->data_dir);
        const int32_t days = o->train_days ? o->train_days : last;
        APP_CHECK(R->ctx, days >= 1 && days <= last, EMBER_ERR_INVALID_ARG,
                  "--data_dir '%s' holds days 0..%d: %s needs day%s 0..%d for training and day %d for evaluation",
                  o->data_dir, (int)last, o->train_days ? "--train_days" : "the default split", days > 1 ? "s" : "",
                  (int)(days - 1), (int)days);
        criteo_npy_config nc = {.dir = o->data_dir,
                                .rows = o->rows,
                                .rank = R->rank,
                                .world = R->world,
                                .global_batch = o->batch_size,
                                .first_day = 0,
                                .num_days = days,
                                .part = NPY_DAYS,
                                .max_rows = 0,
                                .raw_ids = o->collisionless,
                                .hot = o->multi_hot};
        if (!R->eval_only) APP_TRY(criteo_npy_open(R->ctx, &nc, &R->train.npy));
        nc.first_day = days;
        nc.num_days = 1;
        nc.part = o->eval_split ? NPY_SECOND_HALF : NPY_FIRST_HALF;
        APP_TRY(criteo_npy_open(R->ctx, &nc, &R->eval.npy));
    } else {
        const int64_t eval_lines = o->limit_val_batches * o->batch_size;
        criteo_config tc = {.path = o->data_path,
                            .rows = o->rows,
                            .rank = R->rank,
                            .world = R->world,
                            .global_batch = o->batch_size,
                            .first_line = o->eval_data_path ? 0 : eval_lines,
                            .max_lines = 0,
                            .malformed = o->malformed,
                            .raw_ids = o->collisionless};
        if (!R->eval_only) APP_TRY(criteo_open(R->ctx, &tc, &R->train.reader));
        criteo_config ec = tc;
        ec.path = o->eval_data_path ? o->eval_data_path : o->data_path;
        ec.first_line = 0;
        ec.max_lines = eval_lines;
        APP_TRY(criteo_open(R->ctx, &ec, &R->eval.reader));
    }
    // Multi-hot bags read from MLPerf's archives need room in the batches.
    int32_t hot = 0;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) hot += o->multi_hot[f];
    const bool bags = run_data_has_bags(R);
    APP_TRY(dlrm_batch_create(R->ctx, (int32_t)R->max_local, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &R->batch));
    if (bags) APP_TRY(dlrm_batch_reserve_bags(R->ctx, &R->batch, hot));
    if (o->overlap && !R->eval_only) {
        APP_TRY(dlrm_batch_create(R->ctx, (int32_t)R->max_local, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &R->ahead));
        if (bags) APP_TRY(dlrm_batch_reserve_bags(R->ctx, &R->ahead, hot));
    }
    if (o->num_generated_batches > 0 && R->train.syn && !R->eval_only)
        APP_TRY(source_generate(R->ctx, &R->train, o->num_generated_batches, (int32_t)R->max_local));
    R->sizes = app_alloc(R->ctx, sizeof(int64_t) * (size_t)R->world, "batch shares");
    if (!R->sizes) return EMBER_ERR_NOMEM;
    return report_open_metrics(R);
}

bool run_data_has_bags(const run *R) {
    return (R->train.npy && criteo_npy_multi_hot(R->train.npy)) || (R->eval.npy && criteo_npy_multi_hot(R->eval.npy));
}

// Through source_scan_data. When both the eval head and the training lines of one file hold
// nothing usable, the message is about the whole file.
ember_status run_require_data(run *R) {
    const train_options *o = R->o;
    if (o->dataset == TRAIN_CRITEO_NPY) { // every rank opened the same files: a local check
        APP_CHECK(R->ctx, !R->train.npy || criteo_npy_rows(R->train.npy) > 0, EMBER_ERR_FORMAT,
                  "--data_dir '%s': the training days hold no row", o->data_dir);
        APP_CHECK(R->ctx, criteo_npy_rows(R->eval.npy) > 0, EMBER_ERR_FORMAT,
                  "--data_dir '%s': the eval split (--eval_split %s) holds no row", o->data_dir,
                  o->eval_split ? "test" : "val");
        return EMBER_OK;
    }
    if (o->dataset != TRAIN_CRITEO) return EMBER_OK;
    const int64_t held = o->eval_data_path ? 0 : o->limit_val_batches * o->batch_size;
    source_scan eval, train = {.usable = true};
    APP_TRY(source_scan_data(R->comm, &R->eval, &R->batch, R->sizes, &eval));
    if (R->train.reader) APP_TRY(source_scan_data(R->comm, &R->train, &R->batch, R->sizes, &train));
    char window[160] = "", empty[256] = "";
    source_desc d = {.flag = "--data_path", .path = o->data_path};
    const source_scan *scan = &train;
    if (!eval.usable && !train.usable && held) {
        // One file, nothing usable in it: its lines as a whole.
        scan = &eval;
        eval.lines_read = train.lines_read > eval.lines_read ? train.lines_read : eval.lines_read;
        eval.malformed += train.malformed;
        if (!eval.first_bad) {
            eval.first_bad = train.first_bad;
            memcpy(eval.reason, train.reason, sizeof eval.reason);
        }
    } else if (!eval.usable) {
        scan = &eval;
        d.use = "eval";
        if (R->eval_flag) d.flag = R->eval_flag;
        else if (o->eval_data_path) d.flag = "--eval_data_path";
        d.path = o->eval_data_path ? o->eval_data_path : o->data_path;
        // The limit is worth naming where it cut the file short.
        if (held || (o->limit_val_batches && eval.lines_read == o->limit_val_batches * o->batch_size)) {
            snprintf(window, sizeof window, "%s --limit_val_batches %lld x --batch_size %lld",
                     held ? "held out for evaluation:" : "read: at most", (long long)o->limit_val_batches,
                     (long long)o->batch_size);
            d.window = window;
        }
    } else if (!train.usable) {
        d.use = "training";
        d.first_line = held;
        if (o->limit_train_batches && train.lines_read - held == o->limit_train_batches * o->batch_size) {
            snprintf(window, sizeof window, "read: at most --limit_train_batches %lld x --batch_size %lld%s",
                     (long long)o->limit_train_batches, (long long)o->batch_size, held ? " after the first " : "");
            d.window = window;
        }
        if (held) {
            const size_t n = strlen(window);
            snprintf(window + n, sizeof window - n, "%s%lld, held out for evaluation", n ? "" : "after the first ",
                     (long long)held);
            snprintf(empty, sizeof empty,
                     "all lie in the first %lld, held out for evaluation (--limit_val_batches %lld x --batch_size "
                     "%lld): give --eval_data_path FILE, or a smaller --limit_val_batches",
                     (long long)held, (long long)o->limit_val_batches, (long long)o->batch_size);
            d.window = window;
            d.empty_window = empty;
        }
    }
    return scan->usable ? EMBER_OK : source_unusable(R->ctx, &d, scan);
}


ember_status run_join_host(run *R) {
    ember_comm *comm = R->comm;
    ember_status st = app_mpi_status(R->ctx,
                                     MPI_Comm_split_type(ember_comm_mpi(comm), MPI_COMM_TYPE_SHARED, R->rank,
                                                         MPI_INFO_NULL, &R->node),
                                     "host communicator");
    if (st == EMBER_OK) {
        // The host's first rank in the world names the host (a local translation).
        MPI_Group node_group, world_group;
        int zero = 0, leader = 0;
        MPI_Comm_size(R->node, &R->node_size);
        MPI_Comm_group(R->node, &node_group);
        MPI_Comm_group(ember_comm_mpi(comm), &world_group);
        MPI_Group_translate_ranks(node_group, 1, &zero, world_group, &leader);
        MPI_Group_free(&node_group);
        MPI_Group_free(&world_group);
        R->node_leader = leader;
    }
    return ember_comm_agree(comm, st);
}

ember_status run_place_tables(run *R) {
    const train_options *o = R->o;
    ember_comm *comm = R->comm;
    // Every rank reads the same file, or runs the same pure planner on the same inputs: the
    // same plan everywhere.
    ember_ebc_config pe = EMBER_EBC_CONFIG_DEFAULT;
    pe.tables = R->tables, pe.num_tables = DLRM_NUM_SPARSE, pe.features = R->features;
    pe.num_features = DLRM_NUM_SPARSE, pe.ssd_dir = o->ssd_dir;
    const bool plan_auto = !o->plan_path && o->sharding[0] == SHARDING_AUTO;
    // 2D: the plan is a group's (host: every host's ranks, which must be alike in number).
    ember_status st = EMBER_OK;
    int64_t sizes[2] = {R->node_size, -(int64_t)R->node_size};
    if (o->sharding_group_size == -1) st = ember_comm_allreduce_max_i64(comm, sizes, 2);
    const int32_t G = o->sharding_group_size == -1 ? R->node_size : o->sharding_group_size;
    if (st == EMBER_OK && o->sharding_group_size == -1 && sizes[0] != -sizes[1])
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_INVALID_ARG,
                                 "--sharding_group_size host: the hosts run %lld to %lld ranks; give a group size",
                                 (long long)-sizes[1], (long long)sizes[0]);
    else if (st == EMBER_OK && G > 0 && R->world % G != 0)
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_INVALID_ARG,
                                 "--sharding_group_size %d does not divide the %d ranks", (int)G, (int)R->world);
    R->group = st == EMBER_OK && G > 0 && G < R->world ? G : 0;
    const int32_t planW = R->group ? R->group : R->world;
    if (st != EMBER_OK) {
    } else if (o->plan_path) {
        st = planfile_read(R->ctx, o->plan_path, &pe, planW, R->plan);
    } else if (!plan_auto) {
        st = sharding_plan(R->ctx, DLRM_NUM_SPARSE, o->embedding_dim, o->sharding, planW,
                           R->node_size < planW ? R->node_size : planW, R->plan);
    }
    st = ember_comm_agree(comm, st);
    // Hosts and bandwidths (probed unless given); the planner's placement for auto (on one
    // host as ever, across hosts from the predicted time), and every plan's predicted step.
    const int32_t local_batch = o->batch_size / R->world > 0 ? (int32_t)(o->batch_size / R->world) : 1;
    // Multi-hot bags (--multi_hot_sizes) move as many rows per sample as they hold ids.
    float pooling[DLRM_NUM_SPARSE];
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) pooling[f] = (float)o->multi_hot[f];
    if (st == EMBER_OK)
        st = ember_comm_agree(comm, train_topology_plan(comm, &pe, local_batch, pooling, o->intra_gbps,
                                                        o->inter_gbps, o->disk_gbps, plan_auto, R->group, R->plan,
                                                        &R->topo));
    return st;
}
