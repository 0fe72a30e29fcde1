// The DLRM training driver (train.h): the run's setup, the step loop and its reports; evaluation
// is eval.c, the data sources source.c.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "appctx.h"
#include "ember/plan.h"
#include "digest.h"
#include "dlrm.h"
#include "eval.h"
#include "interaction.h"
#include "metrics.h"
#include "planfile.h"
#include "sharding.h"
#include "train_topology.h"
#include "source.h"
#include "synth.h"
#include "train.h"
#include "threads.h"
#include "trainstate.h"

// ---- Defaults (the main job) -------------------------------------------------------------------
// 26 tables from 4 to 100k rows, as Criteo's (hashed) cardinalities spread over orders of
// magnitude; under the automatic rule at dim 16 the 18 small ones are data parallel, 5 middle ones
// table-wise and the 3 largest row-wise. With Zipf 1.2 ids, one pass over 2 M samples ends about
// 0.013 AUC below the planted model (seeds 1-3), well within 2 minutes on 2 cores: docs/dlrm.md.
static const int64_t default_rows[DLRM_NUM_SPARSE] = {
    1000,  20000, 100000, 50000, 300,  30,   10000, 600,   4,    20000, 5000, 80000, 3000,
    30000, 40,    100000, 10,    1000, 2000, 5,     20000, 20,   15,    6000, 100,  80,
};

void train_options_default(train_options *o) {
    memset(o, 0, sizeof *o);
    o->embedding_dim = 16;
    memcpy(o->rows, default_rows, sizeof o->rows);
    const int32_t bottom[] = {64, 16}, top[] = {64, 32, 1};
    o->num_bottom = 2;
    memcpy(o->bottom, bottom, sizeof bottom);
    o->num_top = 3;
    memcpy(o->top, top, sizeof top);
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) o->sharding[f] = SHARDING_AUTO;
    o->grad_convention = EMBER_GRAD_MEAN;
    o->dataset = TRAIN_SYNTHETIC;
    o->zipf_alpha = 1.2;
    o->malformed = CRITEO_SKIP;
    o->batch_size = 2048;
    o->epochs = 1;
    o->limit_train_batches = 1000;
    o->limit_val_batches = 16;
    o->eval_interval = 200;
    o->learning_rate = 0.05f;
    o->dense_optimizer = DENSE_OPT_ADAGRAD;
    o->embedding_optimizer = EMBER_OPT_ROWWISE_ADAGRAD;
    o->seed = 1;
    o->checkpoint_interval = -1; // the resumed checkpoint's, else 0: only at the end
    o->keep_checkpoints = 0;     // the resumed checkpoint's, else 3
    o->timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S;
    o->overlap = true;
    o->cache_policy = EMBER_EVICT_LRU;
    o->hash = (ember_hash_config){1, 0, 1, EMBER_EVICT_LRU, 0};
    o->synth_items = 1;
}

#define DEFAULT_KEEP_CHECKPOINTS 3

// ---- The run -----------------------------------------------------------------------------------

typedef struct run {
    const train_options *o; // &opts
    train_options opts;     // the run's options: as given, with the checkpoint's filled in
    bool eval_only;         // ember eval --load: one evaluation of a saved model
    const char *eval_flag;  // the option that named the eval file, for messages (NULL: as train's)
    ember_comm *comm;
    ember_ctx *ctx;
    FILE *out;              // rank 0's report stream; NULL elsewhere or when silent
    int32_t rank, world;
    MPI_Comm node;          // the ranks of this host
    int32_t node_size;
    int32_t node_leader;    // the world rank of this host's first rank
    int64_t max_local;      // largest rank share of a global batch
    synth *syn;
    source train, eval;
    dlrm_batch batch;
    dlrm_batch ahead;       // --overlap on: the next training batch, fetched before this step
    dlrm_backend backend;
    dlrm_model *model;
    ember_table_config tables[DLRM_NUM_SPARSE];
    ember_feature_config features[DLRM_NUM_SPARSE];
    ember_table_plan plan[DLRM_NUM_SPARSE];
    train_topology topo;    // hosts, bandwidths and the plan's predicted embedding step
    char table_names[DLRM_NUM_SPARSE][16];
    char feature_names[DLRM_NUM_SPARSE][16];
    int64_t *sizes;         // [W] shares of the current global batch
    evaluator ev;           // the eval set's outputs and AUCs
    metrics_writer metrics;
    metrics_row *rows;      // [rows_cap] every evaluation (rank 0), for the plot
    int64_t num_rows, rows_cap;
    int64_t skipped_batches;
    int64_t total_steps;    // 0 when unknown (a Criteo file without --limit_train_batches)
    FILE *bar;              // where the progress bar is drawn (stderr), or NULL: plain lines
    double last_draw;       // progress bar refresh time
    double last_line;       // when the last progress or evaluation line was printed
    uint64_t digest_losses;  // --digest: every step's global loss, in order
    // Checkpoints.
    bool resumed;                          // the model starts from ckpt_path
    char ckpt_path[TRAINSTATE_PATH_MAX];   // the checkpoint resumed from (or loaded by ember eval)
    char ckpt_save_dir[TRAINSTATE_PATH_MAX]; // the save directory it lies in, or ""
    trainstate ckpt;                       // its trainer.json
    int64_t ckpt_generation;
    int32_t ckpt_world;
    char save_dir[TRAINSTATE_PATH_MAX];    // where this run saves, or "" for nowhere
    train_position start;                  // where training starts: zero, or the checkpoint's position
} run;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static dlrm_config model_config(const train_options *o, int64_t max_local) {
    dlrm_config c = {
        .num_dense = DLRM_NUM_DENSE,
        .num_sparse = DLRM_NUM_SPARSE,
        .embedding_dim = o->embedding_dim,
        .bottom_sizes = o->bottom,
        .num_bottom = o->num_bottom,
        .top_sizes = o->top,
        .num_top = o->num_top,
        .max_batch = max_local > INT32_MAX ? INT32_MAX : (int32_t)max_local,
        .seed = o->seed,
        .optim = {.kind = o->dense_optimizer, .lr = o->learning_rate},
    };
    return c;
}

// Checks everything that depends only on the options (identical on every rank). Local.
static ember_status validate_options(ember_ctx *ctx, const train_options *o, int32_t world) {
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
    } else {
        APP_CHECK(ctx, o->data_path != NULL, EMBER_ERR_INVALID_ARG, "--dataset criteo needs --data_path FILE");
        APP_CHECK(ctx, o->eval_data_path != NULL || o->limit_val_batches >= 1, EMBER_ERR_INVALID_ARG,
                  "--dataset criteo without --eval_data_path holds out the first --limit_val_batches global "
                  "batches of --data_path for evaluation: give --limit_val_batches N >= 1");
    }
    if (o->metrics_path) {
        metrics_format fmt;
        APP_TRY(metrics_format_of(ctx, o->metrics_path, &fmt));
    }
    if (o->plot_path) APP_TRY(plot_check_gnuplot(ctx));
    APP_CHECK(ctx, o->checkpoint_interval >= 0, EMBER_ERR_INVALID_ARG, "--checkpoint_interval %lld: expected >= 0",
              (long long)o->checkpoint_interval);
    APP_CHECK(ctx, o->keep_checkpoints >= 1, EMBER_ERR_INVALID_ARG, "--keep_checkpoints %d: expected >= 1",
              (int)o->keep_checkpoints);
    dlrm_config mc = model_config(o, (o->batch_size + world - 1) / world);
    return dlrm_validate(ctx, &mc);
}


static void setup_tables(run *R) {
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

// Bytes this rank needs for the model: its table shards with optimizer state, and the dense part
// (parameters, gradients, optimizer state, activations) roughly.
static double bytes_needed(const run *R, int32_t *largest) {
    const train_options *o = R->o;
    double total = 0.0, big = -1.0;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        size_t w = 0, st = 0;
        // The plan was validated by the planner or the plan-file check: a refusal here counts 0.
        if (ember_shard_rank_bytes(R->ctx, &R->tables[f], &R->plan[f], R->world, R->rank, &w, &st) != EMBER_OK)
            w = st = 0;
        const double b = (double)w + (double)st;
        total += b;
        if (b > big) {
            big = b;
            *largest = f;
        }
    }
    double widths = interaction_out_dim(DLRM_NUM_SPARSE, o->embedding_dim) * 2.0 +
                    DLRM_NUM_SPARSE * (double)o->embedding_dim * 3.0;
    for (int l = 0; l < o->num_bottom; l++) widths += 2.0 * o->bottom[l];
    for (int l = 0; l < o->num_top; l++) widths += 2.0 * o->top[l];
    return total + 4.0 * (double)R->max_local * widths;
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

// Checks that the ranks of each host fit in the host's available memory. Collective (through
// the library's collectives, so under the watchdog): every rank learns every rank's host (its
// first rank) and bytes, and sums its own host's.
static ember_status check_memory(run *R) {
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
                                 host / gib, mine / gib, R->table_names[largest], (long long)R->o->rows[largest],
                                 (int)R->o->embedding_dim, sharding_name(R->plan[largest].scheme), avail / gib);
    }
    return ember_comm_agree(R->comm, st);
}

static ember_status open_data(run *R) {
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
                           .bias = SYNTH_BIAS};
        APP_TRY(synth_create(R->ctx, &sc, &R->syn));
        R->train.syn = R->eval.syn = R->syn;
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
    APP_TRY(dlrm_batch_create(R->ctx, (int32_t)R->max_local, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &R->batch));
    if (o->overlap && !R->eval_only)
        APP_TRY(dlrm_batch_create(R->ctx, (int32_t)R->max_local, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &R->ahead));
    R->sizes = app_alloc(R->ctx, sizeof(int64_t) * (size_t)R->world, "batch shares");
    if (!R->sizes) return EMBER_ERR_NOMEM;
    if (R->rank == 0 && o->metrics_path) APP_TRY(metrics_open(R->ctx, o->metrics_path, &R->metrics));
    return EMBER_OK;
}

// Fails before training when a Criteo file has no usable sample in the lines it is read for
// (source_scan_data), with one message naming the option, the file and what it held. When both
// the eval head and the training lines of one file hold nothing usable, the message is about the
// whole file. Collective; every rank returns the same status.
static ember_status require_data(run *R) {
    const train_options *o = R->o;
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

// The planner's line: hosts, bandwidths and the plan's predicted embedding step.
static void print_topology(const run *R, FILE *f) {
    const train_topology *t = &R->topo;
    fprintf(f, "  topology    %d host%s, intra-host %.2f Gbit/s (%s), inter-host %.2f Gbit/s (%s), round %.3f ms\n",
            (int)t->hosts, t->hosts == 1 ? "" : "s", t->intra_bw * 8 / 1e9,
            t->intra_given ? "given" : t->intra_bw > 0 ? "probed" : "none: one rank per host",
            t->inter_bw * 8 / 1e9, t->inter_given ? "given" : "probed", t->round_s * 1e3);
    if (t->disk_bw > 0)
        fprintf(f, "  disk        %.0f MB/s to and from tiered tables' files in '%s' (probed, 64 MiB)\n", t->disk_bw / 1e6,
                R->o->ssd_dir ? R->o->ssd_dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (isnan(t->predicted_s)) fprintf(f, "  predicted   no embedding step prediction: %s\n", t->why_none);
    else fprintf(f, "  predicted   embedding step %.3f ms (planner, slowest rank)\n", t->predicted_s * 1e3);
}

static void print_config(const run *R) {
    FILE *f = R->out;
    if (!f) return;
    const train_options *o = R->o;
    fprintf(f, "ember train: DLRM on %d rank%s x %d thread%s, gradient convention %s\n", (int)R->world,
            R->world > 1 ? "s" : "", (int)ember_ctx_num_threads(R->ctx),
            ember_ctx_num_threads(R->ctx) > 1 ? "s" : "", o->grad_convention == EMBER_GRAD_MEAN ? "mean" : "sum");
    if (o->threads_note) fprintf(f, "  threads     %s\n", o->threads_note);
    if (o->wire_forward != EMBER_DTYPE_F32 || o->wire_backward != EMBER_DTYPE_F32)
        fprintf(f, "  wire        pooled outputs %s, their gradients %s between ranks\n", ember_dtype_name(o->wire_forward),
                ember_dtype_name(o->wire_backward));
    if (o->dataset == TRAIN_SYNTHETIC) {
        fprintf(f, "  data        synthetic (13 dense, 26 sparse features), seed %llu, zipf alpha %g\n",
                (unsigned long long)o->seed, o->zipf_alpha);
    } else {
        fprintf(f, "  data        criteo '%s', eval ", o->data_path);
        if (o->eval_data_path) fprintf(f, "'%s'", o->eval_data_path);
        else fprintf(f, "its first %lld lines (held out)", (long long)(o->limit_val_batches * o->batch_size));
        fprintf(f, ", malformed lines %s\n", o->malformed == CRITEO_FATAL ? "fatal" : "skipped");
    }
    char train_batches[32] = "all", val_batches[32] = "all";
    if (o->limit_train_batches) snprintf(train_batches, sizeof train_batches, "%lld", (long long)o->limit_train_batches);
    if (o->limit_val_batches) snprintf(val_batches, sizeof val_batches, "%lld", (long long)o->limit_val_batches);
    fprintf(f, "  batches     %lld global (%lld per rank at most); %d epoch%s of %s batches; eval on %s batches",
            (long long)o->batch_size, (long long)R->max_local, (int)o->epochs, o->epochs > 1 ? "s" : "",
            train_batches, val_batches);
    if (o->eval_interval) fprintf(f, " every %lld steps\n", (long long)o->eval_interval);
    else fprintf(f, " at the end\n");
    fprintf(f, "  model       dense arch %d", DLRM_NUM_DENSE);
    for (int l = 0; l < o->num_bottom; l++) fprintf(f, "-%d", (int)o->bottom[l]);
    fprintf(f, ", interaction %d, over arch %d", (int)interaction_out_dim(DLRM_NUM_SPARSE, o->embedding_dim),
            (int)interaction_out_dim(DLRM_NUM_SPARSE, o->embedding_dim));
    for (int l = 0; l < o->num_top; l++) fprintf(f, "-%d", (int)o->top[l]);
    fprintf(f, ": %lld dense parameters\n", (long long)dlrm_num_dense_params(R->model));
    fprintf(f, "  optimizers  dense %s lr %g, embeddings %s lr %g\n", dense_optim_name(o->dense_optimizer),
            (double)o->learning_rate, ember_optim_name(o->embedding_optimizer),
            (double)(o->embedding_learning_rate > 0.0f ? o->embedding_learning_rate : o->learning_rate));
    double rows = 0.0;
    for (int t = 0; t < DLRM_NUM_SPARSE; t++) rows += (double)o->rows[t];
    fprintf(f, "  tables      %d x dim %d, %.0f rows, %.1f MiB of fp32 weights:\n", DLRM_NUM_SPARSE,
            (int)o->embedding_dim, rows, rows * o->embedding_dim * 4.0 / (1024.0 * 1024.0));
    for (int t = 0; t < DLRM_NUM_SPARSE; t++) {
        const ember_table_plan *p = &R->plan[t];
        fprintf(f, "    %-9s %12lld rows  %-4s", R->table_names[t], (long long)o->rows[t], sharding_name(p->scheme));
        const int n = p->num_ranks;
        if (n > 0) {
            fprintf(f, " rank%s", n > 1 ? "s" : "");
            for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : " ", (int)p->ranks[i]);
        } else {
            fprintf(f, " %s", p->scheme == EMBER_SHARD_DATA_PARALLEL ? "replicated" : "all ranks");
        }
        fputc('\n', f);
    }
    print_topology(R, f);
    if (R->resumed) {
        const train_position *p = &R->start;
        fprintf(f, "  resume      '%s': step %lld, epoch %d, next batch %lld (written by %d rank%s, generation %lld)\n",
                R->ckpt_path, (long long)p->steps, (int)p->epoch, (long long)p->next_batch, (int)R->ckpt_world,
                R->ckpt_world > 1 ? "s" : "", (long long)R->ckpt_generation);
    }
    if (R->save_dir[0]) {
        fprintf(f, "  checkpoints ");
        if (o->checkpoint_interval > 0) fprintf(f, "every %lld steps and ", (long long)o->checkpoint_interval);
        fprintf(f, "at the end into '%s/step-*', keeping the newest %d\n", R->save_dir, (int)o->keep_checkpoints);
    } else if (R->resumed) {
        fprintf(f, "  checkpoints none (the checkpoint is not in a save directory: --save_dir DIR saves)\n");
    }
    fflush(f);
}

// Seconds between plain progress lines when no evaluation line comes sooner.
#define PROGRESS_LINE_S 60.0

// Erases the progress bar's line, so that a line of the report starts at its left edge.
static void clear_bar(run *R) {
    if (!R->bar) return;
    fputs("\r\033[K", R->bar);
    fflush(R->bar);
}

// The progress bar (redrawn in place, at most 5 times a second) on an interactive terminal, or,
// for logs, a plain line at most every PROGRESS_LINE_S seconds without an evaluation line.
static void progress(run *R, int64_t step, int32_t epoch, double loss, double sps) {
    if (!R->out) return;
    double t = now_s();
    char where[64];
    if (R->total_steps > 0) snprintf(where, sizeof where, "step %lld/%lld", (long long)step, (long long)R->total_steps);
    else snprintf(where, sizeof where, "step %lld", (long long)step);
    if (!R->bar) {
        if (t - R->last_line < PROGRESS_LINE_S) return;
        R->last_line = t;
        fprintf(R->out, "%s  epoch %d  train loss %.5f  %.0f samples/s\n", where, (int)epoch, loss, sps);
        fflush(R->out);
        return;
    }
    if (t - R->last_draw < 0.2 && step != R->total_steps) return;
    R->last_draw = t;
    fputs("\r\033[K", R->bar);
    if (R->total_steps > 0) {
        char bar[33];
        int fill = (int)(30 * step / R->total_steps);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(R->bar, "[%s] ", bar);
    }
    fprintf(R->bar, "%s  epoch %d  loss %.4f  %.0f samples/s", where, (int)epoch, loss, sps);
    fflush(R->bar);
}

// The eval set's loss and AUC with the tables in evaluation mode (no hashed table admits an eval
// id). Collective.
static ember_status eval_tables(run *R, double *loss, double *auc) {
    if (R->backend.set_training) APP_TRY(R->backend.set_training(R->backend.impl, 0));
    const ember_status st = eval_run(&R->ev, &R->eval, R->model, &R->batch, R->sizes, loss, auc);
    if (R->backend.set_training) R->backend.set_training(R->backend.impl, 1);
    return st;
}

// Evaluates, records a metrics row and reports it. Collective.
static ember_status eval_point(run *R, metrics_row *row) {
    APP_TRY(eval_tables(R, &row->eval_loss, &row->eval_auc));
    row->planted_auc = R->ev.planted_auc;
    ember_status st = EMBER_OK;
    if (R->rank == 0) {
        if (R->metrics.file) st = metrics_write(R->ctx, &R->metrics, row);
        if (st == EMBER_OK && R->num_rows == R->rows_cap) {
            int64_t cap = R->rows_cap ? 2 * R->rows_cap : 64;
            metrics_row *p = app_alloc(R->ctx, sizeof *p * (size_t)cap, "metrics rows");
            if (!p) {
                st = EMBER_ERR_NOMEM;
            } else {
                if (R->num_rows) memcpy(p, R->rows, sizeof *p * (size_t)R->num_rows);
                ember_ctx_free(R->ctx, R->rows);
                R->rows = p;
                R->rows_cap = cap;
            }
        }
        if (st == EMBER_OK) R->rows[R->num_rows++] = *row;
    }
    if (R->out) {
        clear_bar(R);
        R->last_line = now_s();
        fprintf(R->out, "step %6lld  epoch %d  train loss %.5f  eval loss %.5f  eval AUC %.4f", (long long)row->step,
                (int)row->epoch, row->train_loss, row->eval_loss, row->eval_auc);
        if (!isnan(row->planted_auc)) fprintf(R->out, " (planted %.4f)", row->planted_auc);
        if (!isnan(row->samples_per_s)) fprintf(R->out, "  %.0f samples/s", row->samples_per_s);
        fputc('\n', R->out);
        fflush(R->out);
    }
    return ember_comm_agree(R->comm, st);
}

// ---- Checkpoints -------------------------------------------------------------------------------

// Saves the run after `step` into save_dir/step-<step>/: the tables through the backend
// (include/ember/state.h) with trainer.json and the dense blobs (trainstate.h), then removes the
// checkpoints beyond --keep_checkpoints. Collective.
// next_batch: the data position after `step` (the source's own may be one batch ahead).
static ember_status save_checkpoint(run *R, int32_t epoch, int64_t step, int64_t samples, int64_t next_batch) {
    const double t0 = now_s();
    char path[TRAINSTATE_PATH_MAX + 32];
    ember_status st = EMBER_OK;
    if (!ckpt_step_path(R->save_dir, step, path, sizeof path)) {
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
    if (st == EMBER_OK) {
        ember_checkpoint_options opts = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
        opts.blobs = blobs;
        opts.num_blobs = 1 + n;
        st = R->backend.save(R->backend.impl, path, &opts);
    }
    trainstate_text_free(json);
    ember_ctx_free(R->ctx, scratch);
    int32_t removed = 0;
    if (st == EMBER_OK) {
        ember_status pruned = R->rank == 0 ? ckpt_prune(R->ctx, R->save_dir, step, R->o->keep_checkpoints, &removed)
                                           : EMBER_OK;
        st = ember_comm_agree(R->comm, pruned);
    }
    if (st == EMBER_OK && R->out) {
        clear_bar(R);
        fprintf(R->out, "checkpoint '%s' saved in %.2f s", path, now_s() - t0);
        if (removed) fprintf(R->out, "; removed %d older", (int)removed);
        fputc('\n', R->out);
        fflush(R->out);
    }
    return st;
}

// Finds the checkpoint `dir` names (rank 0 looks, every rank learns it) and reads its trainer
// state. Collective.
static ember_status open_checkpoint(run *R, const char *flag, const char *dir) {
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
        ember_checkpoint *c = NULL;
        st = ember_checkpoint_open(R->ctx, R->ckpt_path, &c);
        if (st == EMBER_OK) {
            R->ckpt_generation = ember_checkpoint_generation(c);
            R->ckpt_world = ember_checkpoint_world_size(c);
            st = trainstate_read(R->ctx, c, R->ckpt_path, &R->ckpt);
        }
        ember_checkpoint_close(c);
        st = ember_comm_agree(R->comm, st);
    }
    ember_ctx_free(R->ctx, where);
    if (st == EMBER_OK) {
        R->resumed = true;
        R->start = R->ckpt.pos;
    }
    return st;
}

// Loads the checkpoint into the created model: the tables through the backend, the dense
// parameters and optimizer state, the digests' running values. Collective.
static ember_status restore(run *R) {
    APP_TRY(R->backend.load(R->backend.impl, R->ckpt_path));
    ember_checkpoint *c = NULL;
    ember_status st = ember_checkpoint_open(R->ctx, R->ckpt_path, &c);
    if (st == EMBER_OK) st = trainstate_read_dense(R->ctx, c, R->ckpt_path, R->model, R->ckpt.dense_step);
    ember_checkpoint_close(c);
    APP_TRY(ember_comm_agree(R->comm, st));
    R->digest_losses = R->ckpt.digest_losses;
    if (!R->eval_only) R->ev.digest = R->ckpt.digest_outputs;
    return EMBER_OK;
}

// ---- Training ----------------------------------------------------------------------------------

// Tiered tables' caches over the run (training and evaluation forwards), summed over ranks:
// hit rate, rows moved to and from the files, rows the prefetch asked the kernel to read ahead
// (--overlap on). One line for all of them, and one per table when there are few. Collective.
static ember_status print_tier_stats(run *R) {
    enum { K = 5 };
    double v[DLRM_NUM_SPARSE][K] = {{0}}, tot[K] = {0};
    int n = 0;
    for (int32_t t = 0; t < DLRM_NUM_SPARSE; t++) {
        if (R->tables[t].cache_rows == 0 || !R->backend.tier_stats) continue;
        ember_tier_stats x;
        APP_TRY(R->backend.tier_stats(R->backend.impl, t, &x));
        v[t][0] = (double)x.hits, v[t][1] = (double)x.misses, v[t][2] = (double)x.prefetched;
        v[t][3] = (double)x.bytes_read, v[t][4] = (double)x.bytes_written;
        APP_TRY(ember_comm_allreduce_sum_f64(R->comm, v[t], K));
        for (int k = 0; k < K; k++) tot[k] += v[t][k];
        n++;
    }
    if (n == 0 || !R->out) return EMBER_OK;
    fprintf(R->out,
            "tiered tables (%d): cache hit rate %.3f over %.0f row lookups, %.0f misses (%.0f read ahead by "
            "the prefetch), %.1f MB read from and %.1f MB written to their files\n",
            n, tot[0] + tot[1] > 0 ? tot[0] / (tot[0] + tot[1]) : 0.0, tot[0] + tot[1], tot[1], tot[2], tot[3] / 1e6,
            tot[4] / 1e6);
    for (int32_t t = 0; t < DLRM_NUM_SPARSE && n <= 4; t++)
        if (R->tables[t].cache_rows > 0)
            fprintf(R->out, "  %s: hit rate %.3f, %.0f misses (%.0f read ahead)\n", R->table_names[t],
                    v[t][0] + v[t][1] > 0 ? v[t][0] / (v[t][0] + v[t][1]) : 0.0, v[t][1], v[t][2]);
    return EMBER_OK;
}

static ember_status train_loop(run *R, train_result *res) {
    const train_options *o = R->o;
    const train_position *p = &R->start;
    int64_t step = p->steps, samples = p->samples, last_eval = -1, last_save = R->resumed ? p->steps : -1;
    double win_loss = 0.0, win_samples = 0.0, win_time = 0.0, train_time = 0.0;
    int32_t epoch = p->epoch, last_epoch = p->epoch;
    R->skipped_batches = p->skipped_batches;
    R->last_line = now_s();
    for (; epoch < o->epochs; epoch++) {
        // A resumed run goes on from its batch; every later epoch starts from the first.
        const bool resume_here = R->resumed && epoch == p->epoch;
        APP_TRY(ember_comm_agree(R->comm, resume_here ? source_seek(&R->train, p->next_batch)
                                                      : source_rewind(&R->train)));
        last_epoch = epoch;
        // --overlap on: the next batch is fetched before this step (ahead), so that the step can
        // start its input dist (dlrm_train_step_overlap); the batches and their order are the same.
        bool have_ahead = false;
        fetched ahead_what = FETCH_END;
        int64_t ahead_global = 0, ahead_skipped = 0;
        for (;;) {
            double t0 = now_s();
            fetched what;
            int64_t global;
            if (have_ahead) {
                dlrm_batch t = R->batch;
                R->batch = R->ahead;
                R->ahead = t;
                what = ahead_what;
                global = ahead_global;
                R->skipped_batches += ahead_skipped;
                have_ahead = false;
            } else {
                APP_TRY(source_fetch(R->comm, &R->train, &R->batch, R->sizes, &what, &global));
            }
            if (what == FETCH_END) break;
            if (what == FETCH_SKIP) {
                R->skipped_batches++;
                continue;
            }
            const int64_t next_batch = R->train.next; // the position after this batch
            if (o->overlap) {
                ahead_skipped = 0;
                do {
                    APP_TRY(source_fetch(R->comm, &R->train, &R->ahead, R->sizes, &ahead_what, &ahead_global));
                    ahead_skipped += ahead_what == FETCH_SKIP;
                } while (ahead_what == FETCH_SKIP);
                have_ahead = true;
            }
            double loss = 0.0;
            const float scale = (float)((double)R->world / (double)global);
            if (o->overlap)
                APP_TRY(dlrm_train_step_overlap(R->model, &R->batch, ahead_what == FETCH_OK ? &R->ahead : NULL, scale,
                                                &loss));
            else
                APP_TRY(dlrm_train_step(R->model, &R->batch, scale, &loss));
            APP_TRY(ember_comm_allreduce_sum_f64(R->comm, &loss, 1));
            R->digest_losses = digest_fold(R->digest_losses, &loss, sizeof loss);
            if (res->step_loss && step < res->step_loss_cap) res->step_loss[step] = loss / (double)global;
            step++;
            samples += global;
            win_loss += loss;
            win_samples += (double)global;
            double dt = now_s() - t0;
            win_time += dt;
            train_time += dt;
            progress(R, step, epoch, win_loss / win_samples, win_samples / win_time);
            if (o->eval_interval > 0 && step % o->eval_interval == 0) {
                metrics_row row = {.step = step, .epoch = epoch, .samples = samples,
                                   .train_loss = win_loss / win_samples, .samples_per_s = win_samples / win_time};
                APP_TRY(eval_point(R, &row));
                last_eval = step;
                win_loss = win_samples = win_time = 0.0;
            }
            if (R->save_dir[0] && o->checkpoint_interval > 0 && step % o->checkpoint_interval == 0) {
                APP_TRY(save_checkpoint(R, epoch, step, samples, next_batch));
                last_save = step;
            }
        }
    }
    if (last_eval != step) {
        metrics_row row = {.step = step, .epoch = last_epoch, .samples = samples,
                           .train_loss = win_samples > 0.0 ? win_loss / win_samples : NAN,
                           .samples_per_s = win_time > 0.0 ? win_samples / win_time : NAN};
        APP_TRY(eval_point(R, &row));
    }
    if (R->save_dir[0] && step != last_save) APP_TRY(save_checkpoint(R, last_epoch, step, samples, R->train.next));
    res->steps = step;
    res->seconds = train_time;
    const metrics_row *last = R->rank == 0 ? &R->rows[R->num_rows - 1] : NULL;
    double final[2] = {last ? last->eval_auc : 0.0, last ? last->eval_loss : 0.0};
    APP_TRY(ember_comm_bcast(R->comm, final, sizeof final, 0));
    res->eval_auc = final[0];
    res->eval_loss = final[1];
    res->planted_auc = R->ev.planted_auc;
    APP_TRY(print_tier_stats(R));
    if (R->out) {
        const int64_t run_samples = samples - p->samples;
        fprintf(R->out, "done: %lld steps", (long long)step);
        if (R->resumed) fprintf(R->out, " (%lld after resuming at step %lld)", (long long)(step - p->steps),
                                (long long)p->steps);
        fprintf(R->out, ", %lld samples in %.1f s of training (%.0f samples/s)\n", (long long)run_samples,
                train_time, train_time > 0.0 ? (double)run_samples / train_time : 0.0);
        if (step > p->steps) {
            fprintf(R->out, "step time: measured %.3f ms", train_time * 1e3 / (double)(step - p->steps));
            if (!isnan(R->topo.predicted_s))
                fprintf(R->out, ", predicted %.3f ms for the embeddings (planner)", R->topo.predicted_s * 1e3);
            fputc('\n', R->out);
        }
        fprintf(R->out, "eval AUC %.4f", res->eval_auc);
        if (!isnan(res->planted_auc)) {
            fprintf(R->out, "   planted model AUC %.4f (gap %.4f)", res->planted_auc,
                    res->planted_auc - res->eval_auc);
        }
        fprintf(R->out, "   eval loss %.5f\n", res->eval_loss);
        if (R->skipped_batches) {
            fprintf(R->out, "skipped %lld global batch(es) without a usable line\n",
                    (long long)R->skipped_batches);
        }
    }
    return EMBER_OK;
}

// The final state's hashes (--digest: printed by rank 0; two builds that train the same numbers
// print the same line) and the caller's copies of it: the dense parameters and optimizer state,
// every table's weights and optimizer state gathered in global coordinates. Collective.
static ember_status final_state(run *R, train_result *res) {
    dlrm_model *m = R->model;
    const int64_t np = dlrm_num_dense_params(m);
    const dense_optim *opt = dlrm_dense_optim(m);
    // Whether any rank wants the tables read (a collective), or copied to every rank.
    int64_t want[2] = {R->o->digest || res->tables || res->dense_state, res->tables != NULL};
    APP_TRY(ember_comm_allreduce_max_i64(R->comm, want, 2));
    uint64_t outputs = R->ev.digest;
    APP_TRY(ember_comm_bcast(R->comm, &outputs, sizeof outputs, 0));
    res->digest_losses = R->digest_losses;
    res->digest_outputs = outputs;
    res->digest_dense = digest_fold(DIGEST_SEED, dlrm_dense_params(m), sizeof(float) * (size_t)np);
    res->digest_tables = 0;
    res->dense_state_len = res->tables_len = 0;
    const float *dense[3] = {dlrm_dense_params(m), opt->m1, opt->m2};
    for (int i = 0; i < 3; i++) {
        if (!dense[i]) continue;
        for (int64_t k = 0; k < np && res->dense_state; k++) {
            if (res->dense_state_len + k < res->dense_state_cap) res->dense_state[res->dense_state_len + k] = dense[i][k];
        }
        res->dense_state_len += np;
    }
    if (!want[0]) return EMBER_OK;
    uint64_t tables = DIGEST_SEED;
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < DLRM_NUM_SPARSE && st == EMBER_OK && R->backend.read; t++) {
        ember_tensor_info info[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(&R->tables[t], info);
        for (int32_t k = 0; k < n && st == EMBER_OK; k++) {
            const size_t len = (size_t)info[k].rows * (size_t)info[k].cols;
            // A hashed table's id map is int64: in the digest, not in the float export.
            const bool i64 = info[k].dtype == EMBER_DTYPE_I64;
            const size_t es = i64 ? sizeof(int64_t) : sizeof(float);
            float *buf = app_alloc(R->ctx, es * len, "digest buffer");
            st = ember_comm_agree(R->comm, buf ? EMBER_OK : EMBER_ERR_NOMEM);
            if (st == EMBER_OK)
                st = R->backend.read(R->backend.impl, t, info[k].name, i64 ? EMBER_DTYPE_I64 : EMBER_DTYPE_F32, buf);
            if (st == EMBER_OK) tables = digest_fold(tables, buf, es * len);
            if (st == EMBER_OK && want[1] && !i64) st = ember_comm_bcast(R->comm, buf, sizeof(float) * len, 0);
            if (st == EMBER_OK && want[1] && !i64) {
                for (size_t i = 0; i < len && res->tables; i++) {
                    if (res->tables_len + (int64_t)i < res->tables_cap) res->tables[res->tables_len + (int64_t)i] = buf[i];
                }
                res->tables_len += (int64_t)len;
            }
            ember_ctx_free(R->ctx, buf);
        }
    }
    APP_TRY(st);
    APP_TRY(ember_comm_bcast(R->comm, &tables, sizeof tables, 0)); // read gathers onto rank 0
    if (R->backend.read) res->digest_tables = tables;
    if (R->o->digest && R->out) {
        fprintf(R->out, "digest: losses %016llx outputs %016llx dense %016llx tables %016llx\n",
                (unsigned long long)res->digest_losses, (unsigned long long)res->digest_outputs,
                (unsigned long long)res->digest_dense, (unsigned long long)res->digest_tables);
    }
    return EMBER_OK;
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Reports the malformed lines every rank met in `s` (Criteo). Collective.
static ember_status report_malformed(run *R, const source *s, const char *path) {
    if (!s->reader) return EMBER_OK;
    const size_t W = (size_t)R->world;
    criteo_stats *all = app_alloc(R->ctx, sizeof(criteo_stats) * W, "malformed line report");
    int64_t *lines = app_alloc(R->ctx, sizeof(int64_t) * W * CRITEO_MAX_REPORTED, "malformed line report");
    ember_status st = ember_comm_agree(R->comm, all && lines ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st == EMBER_OK) st = source_gather_stats(R->comm, s, all);
    if (st == EMBER_OK && R->out) {
        int64_t total = 0, n = 0;
        int first = -1;
        for (int32_t r = 0; r < R->world; r++) {
            total += all[r].malformed;
            for (int i = 0; i < all[r].num_lines; i++) lines[n++] = all[r].lines[i];
            if (all[r].num_lines > 0 && (first < 0 || all[r].lines[0] < all[first].lines[0])) first = r;
        }
        qsort(lines, (size_t)n, sizeof *lines, by_value);
        if (n > CRITEO_MAX_REPORTED) n = CRITEO_MAX_REPORTED;
        if (total > 0) {
            fprintf(R->out, "criteo: skipped %lld malformed line%s of '%s': line%s", (long long)total,
                    total > 1 ? "s" : "", path, total > 1 ? "s" : "");
            for (int64_t i = 0; i < n; i++) fprintf(R->out, "%s%lld", i ? ", " : " ", (long long)lines[i]);
            fprintf(R->out, "%s (line %lld: %s)\n", total > n ? ", ..." : "", (long long)all[first].lines[0],
                    all[first].first_reason);
        }
    }
    ember_ctx_free(R->ctx, all);
    ember_ctx_free(R->ctx, lines);
    return st;
}

static void cleanup(run *R) {
    dlrm_destroy(R->model);
    if (R->backend.destroy) R->backend.destroy(R->backend.impl);
    criteo_close(R->ctx, R->train.reader);
    criteo_close(R->ctx, R->eval.reader);
    synth_destroy(R->ctx, R->syn);
    dlrm_batch_destroy(R->ctx, &R->batch);
    dlrm_batch_destroy(R->ctx, &R->ahead);
    metrics_close(&R->metrics);
    ember_ctx_free(R->ctx, R->sizes);
    eval_free(&R->ev);
    ember_ctx_free(R->ctx, R->rows);
    ember_plan_release(R->ctx, R->plan, DLRM_NUM_SPARSE);
    if (R->node != MPI_COMM_NULL) MPI_Comm_free(&R->node);
    trainstate_free(&R->ckpt);
}

static void begin(run *R, ember_comm *comm, const train_options *o, FILE *out, train_result *res) {
    memset(R, 0, sizeof *R);
    R->opts = *o;
    R->o = &R->opts;
    R->comm = comm;
    R->ctx = ember_comm_ctx(comm);
    R->rank = ember_comm_rank(comm);
    R->world = ember_comm_size(comm);
    R->out = R->rank == 0 ? out : NULL;
    R->bar = R->out && o->progress_bar ? stderr : NULL;
    R->node = MPI_COMM_NULL;
    R->digest_losses = DIGEST_SEED;
    res->steps = res->resumed_step = 0;
    res->eval_auc = res->eval_loss = res->planted_auc = NAN;
    res->dense_state_len = res->tables_len = 0;
}

// ember eval --load: the checkpoint's outputs on the eval set. Collective.
static ember_status evaluate_once(run *R, train_result *res) {
    const train_options *o = R->o;
    if (R->out) {
        const train_position *p = &R->start;
        fprintf(R->out, "ember eval: '%s': DLRM after %lld steps (epoch %d), written by %d rank%s; on %d rank%s\n",
                R->ckpt_path, (long long)p->steps, (int)p->epoch, (int)R->ckpt_world, R->ckpt_world > 1 ? "s" : "",
                (int)R->world, R->world > 1 ? "s" : "");
        if (o->dataset == TRAIN_SYNTHETIC) {
            fprintf(R->out, "  data        synthetic eval split, seed %llu, zipf alpha %g: %lld global batches of %lld\n",
                    (unsigned long long)o->seed, o->zipf_alpha, (long long)o->limit_val_batches,
                    (long long)o->batch_size);
        } else {
            const char *path = o->eval_data_path ? o->eval_data_path : o->data_path;
            fprintf(R->out, "  data        criteo '%s', ", path);
            if (o->limit_val_batches) {
                fprintf(R->out, "%s%lld global batches of %lld\n", o->eval_data_path ? "" : "its held-out first ",
                        (long long)o->limit_val_batches, (long long)o->batch_size);
            } else {
                fprintf(R->out, "the whole file in global batches of %lld\n", (long long)o->batch_size);
            }
        }
        fflush(R->out);
    }
    double loss = NAN, auc = NAN;
    APP_TRY(eval_tables(R, &loss, &auc));
    res->steps = R->start.steps;
    res->eval_loss = loss;
    res->eval_auc = auc;
    res->planted_auc = R->ev.planted_auc;
    if (R->out) {
        fprintf(R->out, "eval loss %.5f  eval AUC %.4f", loss, auc);
        if (!isnan(res->planted_auc)) fprintf(R->out, "  (planted model AUC %.4f)", res->planted_auc);
        fputc('\n', R->out);
        fflush(R->out);
    }
    return EMBER_OK;
}

// Everything after the options are settled: placement, data, model, the checkpoint's state, then
// training (or one evaluation). Collective.
static ember_status run_model(run *R, dlrm_backend_factory factory, train_result *res) {
    const train_options *o = R->o;
    ember_comm *comm = R->comm;
    R->max_local = (o->batch_size + R->world - 1) / R->world;
    eval_init(&R->ev, comm, o->dataset == TRAIN_SYNTHETIC,
              R->max_local * (o->limit_val_batches ? o->limit_val_batches : 64));
    R->total_steps = o->limit_train_batches * o->epochs;

    // Everything that can fail on one rank only is agreed before the next collective.
    ember_status st = ember_comm_agree(comm, validate_options(R->ctx, o, R->world));
    if (st == EMBER_OK) {
        st = app_mpi_status(R->ctx,
                       MPI_Comm_split_type(ember_comm_mpi(comm), MPI_COMM_TYPE_SHARED, R->rank, MPI_INFO_NULL,
                                           &R->node),
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
        st = ember_comm_agree(comm, st);
    }
    if (st == EMBER_OK) {
        setup_tables(R);
        // Every rank reads the same file, or runs the same pure planner on the same inputs: the
        // same plan everywhere.
        ember_ebc_config pe = {.tables = R->tables, .num_tables = DLRM_NUM_SPARSE, .features = R->features,
                               .num_features = DLRM_NUM_SPARSE, .ssd_dir = o->ssd_dir};
        const bool plan_auto = !o->plan_path && o->sharding[0] == SHARDING_AUTO;
        if (o->plan_path) {
            st = planfile_read(R->ctx, o->plan_path, &pe, R->world, R->plan);
        } else if (!plan_auto) {
            st = sharding_plan(R->ctx, DLRM_NUM_SPARSE, o->embedding_dim, o->sharding, R->world, R->node_size,
                               R->plan);
        }
        st = ember_comm_agree(comm, st);
        // Hosts and bandwidths (probed unless given); the planner's placement for auto (on one
        // host as ever, across hosts from the predicted time), and every plan's predicted step.
        const int32_t local_batch = o->batch_size / R->world > 0 ? (int32_t)(o->batch_size / R->world) : 1;
        if (st == EMBER_OK)
            st = ember_comm_agree(comm, train_topology_plan(comm, &pe, local_batch, o->intra_gbps, o->inter_gbps,
                                                            plan_auto, R->plan, &R->topo));
    }
    if (st == EMBER_OK) st = check_memory(R);
    if (st == EMBER_OK) st = ember_comm_agree(comm, open_data(R));
    if (st == EMBER_OK) st = require_data(R);
    if (st == EMBER_OK) {
        ember_ebc_config ec = {.tables = R->tables,
                               .num_tables = DLRM_NUM_SPARSE,
                               .features = R->features,
                               .num_features = DLRM_NUM_SPARSE,
                               .bounds = EMBER_BOUNDS_ERROR,
                               .seed = o->seed,
                               .max_batch_size = (int32_t)R->max_local,
                               .max_nnz = DLRM_NUM_SPARSE * R->max_local,
                               .ssd_dir = o->ssd_dir};
        st = factory(comm, &ec, R->plan, o->grad_convention, &R->backend);
    }
    if (st == EMBER_OK && (o->wire_forward != EMBER_DTYPE_F32 || o->wire_backward != EMBER_DTYPE_F32))
        st = R->backend.set_wire_precision
                 ? R->backend.set_wire_precision(R->backend.impl, o->wire_forward, o->wire_backward)
                 : ember_ctx_set_error(R->ctx, EMBER_ERR_UNSUPPORTED,
                                       "--wire_precision: this embedding backend sends fp32 only");
    // The backend is the same on every rank: these verdicts are too.
    if (st == EMBER_OK && R->resumed && !R->backend.load) {
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_UNSUPPORTED, "%s: this embedding backend cannot load checkpoints",
                                 R->eval_only ? "--load" : "--resume");
    }
    if (st == EMBER_OK && R->save_dir[0] && !R->backend.save) {
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_UNSUPPORTED, "--save_dir: this embedding backend cannot save "
                                                                "checkpoints");
    }
    if (st == EMBER_OK && R->save_dir[0]) {
        st = ember_comm_agree(comm, R->rank == 0 ? ckpt_make_save_dir(R->ctx, R->save_dir) : EMBER_OK);
    }
    if (st == EMBER_OK) {
        dlrm_config mc = model_config(o, R->max_local);
        st = ember_comm_agree(comm, dlrm_create(R->ctx, &mc, &R->backend, &R->model));
    }
    if (st == EMBER_OK && R->resumed) st = restore(R);
    if (st == EMBER_OK && R->eval_only) {
        st = evaluate_once(R, res);
        if (st == EMBER_OK) st = final_state(R, res);
        if (st == EMBER_OK) {
            st = report_malformed(R, &R->eval, o->eval_data_path ? o->eval_data_path : o->data_path);
        }
        return st;
    }
    if (st == EMBER_OK) {
        print_config(R);
        res->resumed_step = R->start.steps;
        st = train_loop(R, res);
    }
    if (st == EMBER_OK) st = final_state(R, res);
    if (st == EMBER_OK) st = report_malformed(R, &R->train, o->data_path);
    if (st == EMBER_OK) st = report_malformed(R, &R->eval, o->eval_data_path ? o->eval_data_path : o->data_path);
    if (st == EMBER_OK && o->plot_path) {
        ember_status plot = EMBER_OK;
        if (R->rank == 0) {
            char title[128];
            snprintf(title, sizeof title, "ember train: DLRM, %s data, %d rank%s",
                     o->dataset == TRAIN_SYNTHETIC ? "synthetic" : "criteo", (int)R->world, R->world > 1 ? "s" : "");
            plot = plot_write(R->ctx, o->plot_path, R->rows, R->num_rows, title);
            if (plot == EMBER_OK && R->out) fprintf(R->out, "plot: %s\n", o->plot_path);
        }
        st = ember_comm_agree(comm, plot);
    }
    return st;
}

ember_status train_run(ember_comm *comm, const train_options *o, dlrm_backend_factory factory, FILE *out,
                       train_result *res) {
    run R;
    begin(&R, comm, o, out, res);
    ember_status st = EMBER_OK;
    if (o->resume) {
        // The model must be the one the checkpoint holds, refused before anything is built.
        st = open_checkpoint(&R, "--resume", o->resume);
        if (st == EMBER_OK) st = ember_comm_agree(comm, trainstate_check(R.ctx, &R.ckpt, o));
    }
    if (st == EMBER_OK) {
        // Saving: --save_dir, else the save directory the resumed checkpoint lies in; interval and
        // count as given, else as the checkpoint's run had them, else the defaults.
        train_options *e = &R.opts;
        const char *dir = o->save_dir ? o->save_dir : R.resumed ? R.ckpt_save_dir : "";
        if (strlen(dir) >= sizeof R.save_dir) {
            st = ember_ctx_set_error(R.ctx, EMBER_ERR_INVALID_ARG, "--save_dir '%s': path too long", dir);
        } else {
            snprintf(R.save_dir, sizeof R.save_dir, "%s", dir);
        }
        if (o->checkpoint_interval > 0 && !R.save_dir[0]) {
            st = ember_ctx_set_error(R.ctx, EMBER_ERR_INVALID_ARG,
                                     "--checkpoint_interval %lld: give --save_dir DIR to save into",
                                     (long long)o->checkpoint_interval);
        }
        e->save_dir = R.save_dir[0] ? R.save_dir : NULL;
        if (e->checkpoint_interval < 0) e->checkpoint_interval = R.resumed ? R.ckpt.cfg.checkpoint_interval : 0;
        if (e->keep_checkpoints == 0) e->keep_checkpoints = R.resumed ? R.ckpt.cfg.keep_checkpoints
                                                                      : DEFAULT_KEEP_CHECKPOINTS;
        st = ember_comm_agree(comm, st);
    }
    if (st == EMBER_OK) st = run_model(&R, factory, res);
    cleanup(&R);
    return st;
}

ember_status eval_saved(ember_comm *comm, const eval_options *e, dlrm_backend_factory factory, FILE *out,
                        train_result *res) {
    train_options o;
    train_options_default(&o);
    run R;
    begin(&R, comm, &o, out, res);
    R.eval_only = true;
    ember_status st = open_checkpoint(&R, "--load", e->load);
    if (st == EMBER_OK) {
        // The checkpoint's model and data; placed by the planner for this world; no output files.
        train_options *x = &R.opts;
        const train_options *c = &R.ckpt.cfg;
        x->embedding_dim = c->embedding_dim;
        memcpy(x->rows, c->rows, sizeof x->rows);
        memcpy(x->bottom, c->bottom, sizeof x->bottom);
        x->num_bottom = c->num_bottom;
        memcpy(x->top, c->top, sizeof x->top);
        x->num_top = c->num_top;
        x->grad_convention = c->grad_convention;
        x->dataset = c->dataset;
        x->data_path = c->data_path;
        x->eval_data_path = c->eval_data_path;
        x->zipf_alpha = c->zipf_alpha;
        x->malformed = c->malformed;
        x->batch_size = c->batch_size;
        x->epochs = c->epochs;
        x->limit_train_batches = c->limit_train_batches;
        x->limit_val_batches = c->limit_val_batches;
        x->learning_rate = c->learning_rate;
        x->embedding_learning_rate = c->embedding_learning_rate;
        x->dense_optimizer = c->dense_optimizer;
        x->embedding_optimizer = c->embedding_optimizer;
        x->seed = c->seed;
        x->checkpoint_interval = 0;
        x->keep_checkpoints = 1;
        x->digest = e->digest;
        x->threads_note = e->threads_note;
        if (e->data_path) {
            R.eval_flag = "--data_path";
            x->dataset = TRAIN_CRITEO;
            x->data_path = x->eval_data_path = e->data_path;
            x->limit_val_batches = 0;
        }
        if (e->limit_val_batches >= 0) x->limit_val_batches = e->limit_val_batches;
        st = run_model(&R, factory, res);
    }
    cleanup(&R);
    return st;
}
