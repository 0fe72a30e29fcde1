// `ember train`: command line -> train_options -> train_run on the sharded embedding collection.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "sharding.h"
#include "threads.h"
#include "train.h"

static const char help[] =
    "usage: ember train [options]            (distributed: mpiexec -n N ember train [options])\n"
    "\n"
    "Trains DLRM: a bottom MLP over the 13 dense features, 26 embedding tables sharded over the\n"
    "ranks, pairwise dot interaction (or DCN-v2's cross net: DLRM-DCNv2), a top MLP and BCE loss;\n"
    "the dense part is data parallel.\n"
    "Defaults train the built-in synthetic set and end with the eval AUC beside the planted\n"
    "model's (the best achievable). Flag names follow TorchRec's examples/dlrm/dlrm_main.py.\n"
    "\n"
    "model:\n"
    "  --preset mlperf_dcnv2             MLPerf Training's DLRM-DCNv2: D 128, its 26 row caps and multi-hot\n"
    "                                    sizes, dense arch 512,256,128, 3 cross layers of rank 512, over\n"
    "                                    arch 1024,1024,512,256,1, --adagrad, lr 0.004, batch 65536; the\n"
    "                                    options given override it (e.g. --num_embeddings to fit RAM)\n"
    "  --embedding_dim N                 embedding width D, all tables (default 16)\n"
    "  --num_embeddings N                rows of every table (TorchRec's flag)\n"
    "  --num_embeddings_per_feature L    rows per table: 26 comma-separated values, or one for all\n"
    "                                    (default: 26 sizes from 4 to 100000, see docs/dlrm.md)\n"
    "  --dense_arch_layer_sizes L        bottom MLP layer sizes, last = embedding_dim (default 64,16)\n"
    "  --over_arch_layer_sizes L         top MLP layer sizes, last = 1 (default 64,32,1)\n"
    "  --interaction dot|dcn             DLRM's pairwise dot products (default), or DCN-v2's low-rank\n"
    "                                    cross net over [dense, embeddings] (TorchRec's DLRM_DCN)\n"
    "  --dcn_num_layers N                dcn: cross layers (default 3)\n"
    "  --dcn_low_rank_dim N              dcn: the rank of each layer's weight (default 512)\n"
    "  --multi_hot_sizes L               ids per sample of each feature: 26 comma-separated values, or\n"
    "                                    one for all (default 1): the data's id, then ids drawn from a\n"
    "                                    fixed per-row lookup, as MLPerf's synthetic multi-hot inputs\n"
    "  --multi_hot_distribution_type uniform|pareto  how those ids are drawn (default uniform)\n"
    "  --dedup_features all|LIST         these features (indices or names cat_N, comma-separated) are\n"
    "                                    looked up once per distinct bag of each rank's batch, each\n"
    "                                    sample then reading its bag's row (TorchRec's variable batch\n"
    "                                    per feature); the same numbers up to summation order\n"
    "  --sharding S|L                    auto (the default; plan is a synonym): the library's planner\n"
    "                                    places every table; or dp, tw, cw, rw, twrw or grid for\n"
    "                                    every table, or 26 of them comma-separated (grid: 2\n"
    "                                    column slices, each row-wise over W / 2 ranks)\n"
    "  --plan FILE                       the tables' placement from a plan file that\n"
    "                                    'ember plan --output FILE' wrote (instead of --sharding)\n"
    "  --intra_gbps G, --inter_gbps G    Gbit/s between ranks of a host / of each host's link, for\n"
    "                                    the planner (default: probed at start, 4 MiB x 3); hosts\n"
    "                                    are the ranks sharing memory. auto plans on one host as\n"
    "                                    always, across hosts on the predicted step time; every plan's\n"
    "                                    predicted embedding step is printed with the measured one\n"
    "  --sharding_group_size G|host      2D parallelism: the tables sharded (as --sharding or --plan\n"
    "                                    place them, over G ranks) within each group of G ranks and\n"
    "                                    replicated over the W / G groups, the replicas' touched rows'\n"
    "                                    gradients summed once a step (host: a group per host, whose\n"
    "                                    ranks must be consecutive; default: one group of W)\n"
    "  --rebalance_every N               every N steps, re-plan from each rank's measured embedding\n"
    "                                    time and move the tables when the new plan predicts a step\n"
    "                                    at least 10%% faster (default 0: never; docs/dlrm.md)\n"
    "  --disk_gbps G                     Gbit/s to and from tiered tables' files, for the planner\n"
    "                                    (default: probed at start in --ssd_dir, with a file of\n"
    "                                    at most the size of the run's files, 1 to 64 MiB)\n"
    "  --grad_convention mean|sum        objective over ranks: mean (default) or sum of rank losses\n"
    "  --wire_precision P[,Q]            fp32 (default, exact), fp16, bf16, fp8_e4m3, fp8_e5m2 or\n"
    "                                    int8 (row-wise): pooled embeddings (P) and their gradients\n"
    "                                    (Q, default P) between ranks; a value the format cannot\n"
    "                                    hold stops the step (docs/sharding.md)\n"
    "  --wire_loss_scale S[,T]           the float formats' loss scales: values times S (pooled)\n"
    "                                    or T (gradients, default S) on the wire (default 1)\n"
    "\n"
    "data:\n"
    "  --dataset synthetic|criteo|criteo_npy  (default synthetic)\n"
    "  --data_path FILE                  criteo: training TSV (label, 13 integers, 26 hex categoricals)\n"
    "  --eval_data_path FILE             criteo: eval TSV (default: hold out the first\n"
    "                                    --limit_val_batches batches of --data_path)\n"
    "  --zipf_alpha X                    synthetic: Zipf exponent of the ids (default 1.2)\n"
    "  --candidates_per_request N        synthetic: samples come in requests of N candidates, which\n"
    "                                    share the ids of the --user_features\n"
    "  --user_features all|LIST          synthetic: features (indices or names cat_N) holding a user's\n"
    "                                    ids, the same over a request's candidates\n"
    "  --num_generated_batches N         synthetic: generate training batches 0..N-1 before training\n"
    "                                    and cycle them (batch g is batch g mod N; TorchRec's\n"
    "                                    RandomRecDataset); default: every batch new, generated\n"
    "                                    as it is read\n"
    "  --malformed skip|fatal            criteo: skip and count malformed lines, or stop (default skip)\n"
    "  --data_dir DIR                    criteo_npy: TorchRec's preprocessed day files day_{d}_dense.npy,\n"
    "                                    day_{d}_sparse.npy, day_{d}_labels.npy, read in place\n"
    "  --train_days N                    criteo_npy: days 0..N-1 train, day N evaluates (default: every\n"
    "                                    day but the last)\n"
    "  --eval_split val|test             criteo_npy: the eval day's first half (val, default) or the\n"
    "                                    rest (test)\n"
    "                                    (the options of one dataset are refused with the others; a\n"
    "                                    file without a usable line stops the run)\n"
    "\n"
    "training:\n"
    "  --batch_size N                    global batch, split over the ranks (default 2048)\n"
    "  --epochs N                        passes over the training data (default 1)\n"
    "  --limit_train_batches N           global batches per epoch; synthetic: the training set size\n"
    "                                    (default 1000; 0 = whole file for criteo, criteo_npy)\n"
    "  --limit_val_batches N             eval global batches (default 16; 0 = the whole eval data for\n"
    "                                    criteo, criteo_npy)\n"
    "  --eval_interval N                 evaluate every N steps, and at the end (default 200; 0 = end)\n"
    "  --learning_rate X                 (default 0.05)\n"
    "  --embedding_learning_rate X       embedding tables' rate (default: --learning_rate)\n"
    "  --adagrad                         Adagrad for the dense part and row-wise Adagrad for the tables,\n"
    "                                    as TorchRec's flag (the default here)\n"
    "  --dense_optimizer sgd|adagrad|adam                                      (default adagrad)\n"
    "  --embedding_optimizer NAME        the tables' optimizer (default rowwise_adagrad), one of\n"
    "                                    %s\n"
    "  --seed N                          data, planted model and initial weights (default 1)\n"
    "  --threads N                       threads per rank, each pinned to a CPU of its own (default:\n"
    "                                    OMP_NUM_THREADS, else the host's CPUs over its ranks)\n"
    "  --timeout_s S                     deadline of every collective (default 600; 0: none): when a\n"
    "                                    rank stalls or dies, the others stop after S seconds naming\n"
    "                                    it, and the job exits non-zero instead of hanging\n"
    "  --overlap on|off                  overlap communication with computation (default on): the next\n"
    "                                    batch's input dist starts after this step's embedding forward,\n"
    "                                    the embedding backward's exchanges travel during the dense\n"
    "                                    backward; the results are bitwise the same either way\n"
    "  --prefetch_batches N              batches a loader thread produces ahead of the step (0: each\n"
    "                                    one when the step needs it, on the step's threads; default 2\n"
    "                                    where the host has a CPU no rank's thread is pinned to, else 0);\n"
    "                                    the same batches either way (the report's data wait says\n"
    "                                    whether the data holds the steps up)\n"
    "\n"
    "tables beyond RAM and beyond fixed id ranges (docs/tiered.md, docs/hashed.md):\n"
    "  --ssd_tables all|LIST             these tables (indices or names t_cat_N, comma-separated) live\n"
    "                                    in a file on local disk behind a DRAM cache (same numbers)\n"
    "  --cache_rows N                    rows of each such table's cache (every batch must fit)\n"
    "  --cache_policy lru|lfu            which cached rows leave first (default lru)\n"
    "  --ssd_dir DIR                     where their files go (default $TMPDIR, else /tmp)\n"
    "  --hash modulo|collisionless       categorical values to rows: modulo the table's rows (the\n"
    "                                    default; unrelated values share rows), or collisionless:\n"
    "                                    every value gets a row of its own, up to the table's rows\n"
    "  --hash_min_count N                collisionless: a value gets a row at its N-th occurrence\n"
    "  --hash_policy lru|lfu|ttl         collisionless: which rows leave when a bucket is full\n"
    "  --hash_ttl STEPS                  collisionless, ttl: rows unused this long are dropped\n"
    "  --hash_bucket_rows N              collisionless: rows per hash bucket, >= 2 (default 16); a\n"
    "                                    table's rows are rounded up to whole buckets\n"
    "  --synth_items K                   synthetic: K distinct items per table row, each a 64-bit\n"
    "                                    value (default 1: the items are the rows)\n"
    "\n"
    "checkpoints (docs/dlrm.md, Resume):\n"
    "  --save_dir DIR                    save DIR/step-<step, 10 digits>/ (tables, dense parameters,\n"
    "                                    optimizer state, data position) every --checkpoint_interval\n"
    "                                    steps and at the end\n"
    "  --checkpoint_interval N           steps between checkpoints (default 0: only at the end)\n"
    "  --keep_checkpoints K              keep the newest K checkpoints in DIR (default 3)\n"
    "  --checkpoint_delta_interval N     every N steps between full checkpoints, save only the rows\n"
    "                                    changed since into the newest full checkpoint this run saved\n"
    "                                    (a full one when there is none yet); its directory keeps the\n"
    "                                    name of the full save's step (default 0: no deltas)\n"
    "  --resume DIR                      go on from the latest committed checkpoint of save directory\n"
    "                                    DIR (or from checkpoint directory DIR) to the configured end;\n"
    "                                    the model must be the same, the batch limits and epochs may\n"
    "                                    grow. Without --save_dir, saving goes on into DIR's save\n"
    "                                    directory with the checkpoint's interval and count\n"
    "\n"
    "output (rank 0):\n"
    "  --metrics FILE.csv|FILE.jsonl     one row per evaluation: step, epoch, samples, train loss,\n"
    "                                    eval loss, eval AUC, planted AUC, samples/s, data wait\n"
    "  --plot FILE.png                   loss and AUC curves, drawn by gnuplot (FILE.png.gp is kept)\n"
    "  --mllog FILE                      MLPerf's log: :::MLLOG lines (run_start, epochs, evaluations,\n"
    "                                    eval_accuracy, run_stop with its status)\n"
    "  --target_auc A                    stop at the first evaluation whose AUC reaches A and print the\n"
    "                                    time to train (MLPerf's DLRM target: 0.80275)\n"
    "  --progress auto|bar|lines         bar: a progress bar on stderr, redrawn in place; lines: a line\n"
    "                                    per evaluation, and one a minute between them; auto (default):\n"
    "                                    bar when stderr is a terminal, else lines (under mpiexec a\n"
    "                                    rank's stderr is a pipe: lines, unless --progress bar)\n"
    "  --digest                          end with hashes of the loss curve, eval outputs, dense\n"
    "                                    parameters and tables' weights and optimizer state\n"
    "                                    (equal lines: the same numbers, bit for bit)\n"
    "  -h, --help                        this text\n"
    "\n"
    "examples:\n"
    "  mpiexec -n 2 build/bin/ember train --batch_size 2048 --limit_train_batches 1000 \\\n"
    "      --metrics dlrm.csv --plot dlrm.png\n"
    "  mpiexec -n 2 build/bin/ember train --save_dir ckpt --checkpoint_interval 200   (killed at step 700)\n"
    "  mpiexec -n 2 build/bin/ember train --resume ckpt       (on from step 600, saving into ckpt)\n";

// What the command line fills: the run's options and what cmd_train itself uses. The options come
// first, so that a row's field offset within train_options is its offset here (cmd_train_flags).
typedef struct train_cli {
    train_options o; // first
    int32_t threads; // --threads (0: not given)
    int progress;    // --progress: PROGRESS_AUTO, _BAR or _LINES
    int preset;      // --preset: PRESET_NONE or PRESET_MLPERF_DCNV2
} train_cli;

enum { PRESET_NONE = 0, PRESET_MLPERF_DCNV2 = 1 };

enum { PROGRESS_AUTO = 0, PROGRESS_BAR = 1, PROGRESS_LINES = 2 };

#define MAX_INT32 2147483647
#define MAX_ROWS ((int64_t)1 << 48)
#define MAX_COUNT ((int64_t)1 << 40)

// ---- Values that need more than a number or a name ---------------------------------------------

// One value for all 26 features, or 26 values.
static bool parse_per_feature(const char *flag, int count, int got, char *err, size_t cap) {
    if (got == 1 || got == count) return true;
    snprintf(err, cap, "%s: %d values given, expected 1 (for every feature) or %d", flag, got, count);
    return false;
}

static bool set_rows(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    int64_t v, *rows = field;
    if (!cli_parse_i64(flag, text, 1, MAX_ROWS, &v, err, cap)) return false;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) rows[f] = v;
    return true;
}

static bool set_rows_per_feature(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    int64_t list[DLRM_NUM_SPARSE], *rows = field;
    int n;
    if (!cli_parse_i64_list(flag, text, 1, MAX_ROWS, list, DLRM_NUM_SPARSE, &n, err, cap) ||
        !parse_per_feature(flag, DLRM_NUM_SPARSE, n, err, cap)) {
        return false;
    }
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) rows[f] = list[n == 1 ? 0 : f];
    return true;
}

// --multi_hot_sizes: 26 values or one for all.
static bool set_multi_hot(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    int64_t list[DLRM_NUM_SPARSE];
    int32_t *hot = field;
    int n;
    if (!cli_parse_i64_list(flag, text, 1, MULTIHOT_MAX_HOT, list, DLRM_NUM_SPARSE, &n, err, cap) ||
        !parse_per_feature(flag, DLRM_NUM_SPARSE, n, err, cap)) {
        return false;
    }
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) hot[f] = (int32_t)list[n == 1 ? 0 : f];
    return true;
}

static bool parse_layers(const char *flag, const char *text, int32_t *sizes, int32_t *n, char *err, size_t cap) {
    int64_t v[TRAIN_MAX_LAYERS];
    int k;
    if (!cli_parse_i64_list(flag, text, 1, 65536, v, TRAIN_MAX_LAYERS, &k, err, cap)) return false;
    for (int i = 0; i < k; i++) sizes[i] = (int32_t)v[i];
    *n = k;
    return true;
}

static bool set_bottom(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    train_options *o = &((train_cli *)base)->o;
    (void)field;
    return parse_layers(flag, text, o->bottom, &o->num_bottom, err, cap);
}

static bool set_top(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    train_options *o = &((train_cli *)base)->o;
    (void)field;
    return parse_layers(flag, text, o->top, &o->num_top, err, cap);
}

// --sharding S or 26 of them: SHARDING_AUTO alone, or a scheme per table.
static bool set_sharding(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base, (void)flag;
    int *sharding = field;
    char item[16], planner[16] = "";
    int n = 0, got[DLRM_NUM_SPARSE];
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int s = len < sizeof item ? (memcpy(item, p, len), item[len] = '\0', sharding_parse(item)) : -2;
        if (s == -2) {
            snprintf(err, cap, "--sharding '%.*s': expected auto, plan, dp, tw, cw, rw, twrw or grid", (int)len, p);
            return false;
        }
        if (n == DLRM_NUM_SPARSE) {
            snprintf(err, cap, "--sharding: more than %d schemes", DLRM_NUM_SPARSE);
            return false;
        }
        if (s == SHARDING_AUTO) memcpy(planner, item, sizeof item);
        got[n++] = s;
        if (!comma) break;
        p = comma + 1;
    }
    if (planner[0] && n > 1) {
        snprintf(err, cap, "--sharding %s places every table (the library's planner): give it alone, not in a list",
                 planner);
        return false;
    }
    if (!parse_per_feature("--sharding", DLRM_NUM_SPARSE, n, err, cap)) return false;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) sharding[f] = got[n == 1 ? 0 : f];
    return true;
}

// --intra_gbps, --inter_gbps, --disk_gbps: Gbit/s in (0, 1e9).
// A group size, or "host" (-1).
static bool set_group_size(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    int32_t *g = field;
    if (!strcmp(text, "host")) {
        *g = -1;
        return true;
    }
    double v = 0;
    if (cli_parse_double(flag, text, &v, err, cap) && v >= 1 && v <= 1 << 20 && v == (int32_t)v) {
        *g = (int32_t)v;
        return true;
    }
    snprintf(err, cap, "%s %.64s: expected a number of ranks >= 1, or host", flag, text);
    return false;
}

static bool set_gbps(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    double *g = field;
    if (!cli_parse_double(flag, text, g, err, cap)) return false;
    if (*g > 0 && *g < 1e9) return true;
    snprintf(err, cap, "%s %.64s: expected Gbit/s > 0", flag, text);
    return false;
}

// A dtype the wire carries (ember_dtype_is_wire).
static bool wire_dtype(const char *name, ember_dtype *dt) {
    ember_dtype d;
    if (ember_dtype_parse(name, &d) != EMBER_OK || !ember_dtype_is_wire(d)) return false;
    *dt = d;
    return true;
}

// --wire_precision P or P,Q: a wire dtype each.
static bool set_wire_precision(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    train_options *o = &((train_cli *)base)->o;
    (void)field, (void)flag;
    char a[16] = "", b[16] = "";
    const char *comma = strchr(text, ',');
    const size_t n = comma ? (size_t)(comma - text) : strlen(text);
    if (n < sizeof a) memcpy(a, text, n), a[n] = '\0';
    if (comma && strlen(comma + 1) < sizeof b) strcpy(b, comma + 1);
    ember_dtype fwd, bwd;
    if (n >= sizeof a || !wire_dtype(a, &fwd) || (comma ? !wire_dtype(b, &bwd) : (bwd = fwd, false))) {
        snprintf(err, cap,
                 "--wire_precision '%s': expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 or int8, or two of them "
                 "comma-separated",
                 text);
        return false;
    }
    o->wire_forward = fwd;
    o->wire_backward = bwd;
    return true;
}

// --wire_loss_scale S or S,T: finite and > 0 each.
static bool set_wire_loss_scale(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    train_options *o = &((train_cli *)base)->o;
    (void)field, (void)flag;
    char *end = NULL;
    const float s = strtof(text, &end);
    float t = s;
    bool ok = end != text && isfinite(s) && s > 0;
    if (ok && *end == ',') {
        const char *u = end + 1;
        t = strtof(u, &end);
        ok = end != u && isfinite(t) && t > 0;
    }
    if (!ok || *end != '\0') {
        snprintf(err, cap, "--wire_loss_scale '%.64s': expected a number > 0, or two comma-separated", text);
        return false;
    }
    o->wire_scale_forward = s;
    o->wire_scale_backward = t;
    return true;
}

// A list of tables (t_cat_3) or features (cat_3), by index or name, comma-separated, or all: a bit each.
static bool parse_mask(const char *flag, const char *text, bool features, uint32_t *mask, char *err, size_t cap) {
    *mask = 0;
    if (strcmp(text, "all") == 0) {
        *mask = (1u << DLRM_NUM_SPARSE) - 1;
        return true;
    }
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        const int len = comma ? (int)(comma - p) : (int)strlen(p);
        int f = -1;
        char name[16];
        for (int t = 0; t < DLRM_NUM_SPARSE && f < 0; t++) {
            sharding_table_name(t, name, sizeof name);
            const char *nm = features ? name + 2 : name; // t_cat_N names table N, cat_N its feature
            char num[8];
            snprintf(num, sizeof num, "%d", t);
            if (((int)strlen(nm) == len && !strncmp(p, nm, (size_t)len)) ||
                ((int)strlen(num) == len && !strncmp(p, num, (size_t)len)))
                f = t;
        }
        if (f < 0) {
            snprintf(err, cap, "%s '%.*s': not a %s (all, 0..%d or %scat_0..%scat_%d)", flag, len, p,
                     features ? "feature" : "table", DLRM_NUM_SPARSE - 1, features ? "" : "t_", features ? "" : "t_",
                     DLRM_NUM_SPARSE - 1);
            return false;
        }
        *mask |= 1u << f;
        if (!comma) return true;
        p = comma + 1;
    }
}

// --ssd_tables all, or table indices / names (t_cat_3) comma-separated: a bit per table.
static bool set_tables(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    return parse_mask(flag, text, false, field, err, cap);
}

// --dedup_features, --user_features: feature indices / names (cat_3), or all.
static bool set_features(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base;
    return parse_mask(flag, text, true, field, err, cap);
}

// --adagrad: TorchRec's flag, Adagrad for the dense part and row-wise Adagrad for the tables.
static bool set_adagrad(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    train_options *o = &((train_cli *)base)->o;
    (void)field, (void)flag, (void)text, (void)err, (void)cap;
    o->dense_optimizer = DENSE_OPT_ADAGRAD;
    o->embedding_optimizer = EMBER_OPT_ROWWISE_ADAGRAD;
    return true;
}

// ---- The names of the values (NULL past the last): cli.h's, and these ---------------------------

// A cache's policy: lru or lfu (ttl is for hashed tables).
static const char *cache_policy_name(int v) {
    return v < EMBER_EVICT_TTL ? ember_evict_policy_name((ember_evict_policy)v) : NULL;
}
static const char *on_off_name(int v) { return v == 0 ? "off" : v == 1 ? "on" : NULL; }
static const char *preset_name(int v) { return v == PRESET_NONE ? "none" : v == PRESET_MLPERF_DCNV2 ? "mlperf_dcnv2" : NULL; }
static const char *progress_name(int v) {
    static const char *const names[] = {"auto", "bar", "lines"};
    return v < 3 ? names[v] : NULL;
}

// ---- The options -------------------------------------------------------------------------------

// The data set an option belongs to (the others take it as given): an option of the other one is
// a usage error; so is an option of collisionless hashing with --hash modulo.
enum { ANY_DATA = 0, CRITEO_ONLY = 1, SYNTHETIC_ONLY = 2, HASH_ONLY = 3, NPY_ONLY = 4 };

#define F(m) CLI_FIELD(train_cli, m)
#define INT(name, m, lo, hi) {name, CLI_INT, F(m), lo, hi, NULL, NULL, ANY_DATA}
#define HASH_INT(name, m, lo, hi) {name, CLI_INT, F(m), lo, hi, NULL, NULL, HASH_ONLY}
#define REAL(name, m, data) {name, CLI_REAL, F(m), 0, 0, NULL, NULL, data}
#define TEXT(name, m, data) {name, CLI_TEXT, F(m), 0, 0, NULL, NULL, data}
#define NAME(name, m, names, data) {name, CLI_NAME, F(m), 0, 0, names, NULL, data}
#define CALL(name, m, call) {name, CLI_CALL, F(m), 0, 0, NULL, call, ANY_DATA}
#define SET(name, m, call) {name, CLI_SET, F(m), 0, 0, NULL, call, ANY_DATA}

// In --help's order. Ranges and names are the accepted values; defaults are train_options_default's.
static const cli_flag flags[] = {
    // model
    NAME("preset", preset, preset_name, ANY_DATA),
    INT("embedding_dim", o.embedding_dim, 1, 65536),
    CALL("num_embeddings", o.rows, set_rows),
    CALL("num_embeddings_per_feature", o.rows, set_rows_per_feature),
    CALL("dense_arch_layer_sizes", o.bottom, set_bottom),
    CALL("over_arch_layer_sizes", o.top, set_top),
    NAME("interaction", o.interaction, cli_name_interaction, ANY_DATA),
    INT("dcn_num_layers", o.dcn_num_layers, 1, 64),
    INT("dcn_low_rank_dim", o.dcn_low_rank_dim, 1, 65536),
    CALL("multi_hot_sizes", o.multi_hot, set_multi_hot),
    CALL("dedup_features", o.dedup_features, set_features),
    NAME("multi_hot_distribution_type", o.multi_hot_dist, multihot_dist_name, ANY_DATA),
    CALL("sharding", o.sharding, set_sharding),
    TEXT("plan", o.plan_path, ANY_DATA),
    CALL("intra_gbps", o.intra_gbps, set_gbps),
    CALL("inter_gbps", o.inter_gbps, set_gbps),
    CALL("disk_gbps", o.disk_gbps, set_gbps),
    CALL("sharding_group_size", o.sharding_group_size, set_group_size),
    INT("rebalance_every", o.rebalance_every, 0, MAX_COUNT),
    NAME("grad_convention", o.grad_convention, cli_name_grad_convention, ANY_DATA),
    CALL("wire_precision", o.wire_forward, set_wire_precision),
    CALL("wire_loss_scale", o.wire_scale_forward, set_wire_loss_scale),
    // data
    NAME("dataset", o.dataset, cli_name_dataset, ANY_DATA),
    TEXT("data_path", o.data_path, CRITEO_ONLY),
    TEXT("eval_data_path", o.eval_data_path, CRITEO_ONLY),
    REAL("zipf_alpha", o.zipf_alpha, SYNTHETIC_ONLY),
    {"num_generated_batches", CLI_INT, F(o.num_generated_batches), 1, 4096, NULL, NULL, SYNTHETIC_ONLY},
    {"candidates_per_request", CLI_INT, F(o.request_size), 1, 1 << 20, NULL, NULL, SYNTHETIC_ONLY},
    {"user_features", CLI_CALL, F(o.user_features), 0, 0, NULL, set_features, SYNTHETIC_ONLY},
    NAME("malformed", o.malformed, cli_name_malformed, CRITEO_ONLY),
    TEXT("data_dir", o.data_dir, NPY_ONLY),
    {"train_days", CLI_INT, F(o.train_days), 1, 1 << 20, NULL, NULL, NPY_ONLY},
    NAME("eval_split", o.eval_split, cli_name_eval_split, NPY_ONLY),
    // training
    INT("batch_size", o.batch_size, 1, MAX_COUNT),
    INT("epochs", o.epochs, 1, MAX_INT32),
    INT("limit_train_batches", o.limit_train_batches, 0, MAX_COUNT),
    INT("limit_val_batches", o.limit_val_batches, 0, MAX_COUNT),
    INT("eval_interval", o.eval_interval, 0, MAX_COUNT),
    REAL("learning_rate", o.learning_rate, ANY_DATA),
    REAL("embedding_learning_rate", o.embedding_learning_rate, ANY_DATA),
    SET("adagrad", o.dense_optimizer, set_adagrad),
    NAME("dense_optimizer", o.dense_optimizer, cli_name_dense_optimizer, ANY_DATA),
    NAME("embedding_optimizer", o.embedding_optimizer, cli_name_embedding_optimizer, ANY_DATA),
    INT("seed", o.seed, 0, INT64_MAX),
    INT("threads", threads, 0, 4096),
    CALL("timeout_s", o.timeout_s, cli_call_timeout),
    NAME("overlap", o.overlap, on_off_name, ANY_DATA),
    INT("prefetch_batches", o.prefetch_batches, 0, 64),
    // tables beyond RAM and beyond fixed id ranges
    CALL("ssd_tables", o.ssd_tables, set_tables),
    INT("cache_rows", o.cache_rows, 1, MAX_ROWS),
    NAME("cache_policy", o.cache_policy, cache_policy_name, ANY_DATA),
    TEXT("ssd_dir", o.ssd_dir, ANY_DATA),
    NAME("hash", o.collisionless, cli_name_hash, ANY_DATA),
    HASH_INT("hash_min_count", o.hash.min_count, 1, MAX_COUNT),
    NAME("hash_policy", o.hash.policy, cli_name_evict_policy, HASH_ONLY),
    HASH_INT("hash_ttl", o.hash.ttl_steps, 1, MAX_COUNT),
    HASH_INT("hash_bucket_rows", o.hash.bucket_rows, 2, 1 << 20),
    INT("synth_items", o.synth_items, 1, 1 << 20),
    // checkpoints
    TEXT("save_dir", o.save_dir, ANY_DATA),
    INT("checkpoint_interval", o.checkpoint_interval, 0, MAX_COUNT),
    INT("keep_checkpoints", o.keep_checkpoints, 1, MAX_INT32),
    INT("checkpoint_delta_interval", o.checkpoint_delta_interval, 1, MAX_COUNT),
    TEXT("resume", o.resume, ANY_DATA),
    // output
    TEXT("metrics", o.metrics_path, ANY_DATA),
    TEXT("mllog", o.mllog_path, ANY_DATA),
    REAL("target_auc", o.target_auc, ANY_DATA),
    TEXT("plot", o.plot_path, ANY_DATA),
    NAME("progress", progress, progress_name, ANY_DATA),
    SET("digest", o.digest, NULL),
};
#define NUM_FLAGS ((int)(sizeof flags / sizeof flags[0]))

// The row of option `name`.
static int row(const char *name) {
    for (int i = 0; i < NUM_FLAGS; i++) {
        if (strcmp(flags[i].name, name) == 0) return i;
    }
    return -1;
}

// The first option given of data set `data` ("--name"), or NULL. order: cli_parse_flags's.
static const char *first_of(const int *order, int data, char *buf, size_t cap) {
    int first = -1;
    for (int i = 0; i < NUM_FLAGS; i++) {
        if (flags[i].group == data && order[i] && (first < 0 || order[i] < order[first])) first = i;
    }
    if (first < 0) return NULL;
    snprintf(buf, cap, "--%s", flags[first].name);
    return buf;
}

// The options that do not go together. Returns false with the message in err.
static bool check_together(const train_options *o, const int *order, char *err, size_t cap) {
    char criteo[64], synthetic[64], npy[64];
    const char *criteo_only = first_of(order, CRITEO_ONLY, criteo, sizeof criteo);
    const char *synthetic_only = first_of(order, SYNTHETIC_ONLY, synthetic, sizeof synthetic);
    const char *npy_only = first_of(order, NPY_ONLY, npy, sizeof npy);
    if ((o->request_size > 1) != (o->user_features != 0)) {
        snprintf(err, cap, "%s", o->user_features ? "--user_features repeat over the candidates of a request: give "
                                                    "--candidates_per_request N (N >= 2)"
                                                  : "--candidates_per_request N repeats the --user_features over N "
                                                    "samples: name them");
        return false;
    }
    if (o->sharding_group_size != 0 && (o->rebalance_every > 0 || o->ssd_tables || o->collisionless)) {
        snprintf(err, cap, "--sharding_group_size replicates the tables over groups of ranks: not with %s",
                 o->rebalance_every > 0 ? "--rebalance_every (save, and resume under another placement)"
                 : o->ssd_tables        ? "--ssd_tables (each replica's cache would follow its group's ids)"
                                        : "--hash collisionless (each replica's id map would follow its group's ids)");
        return false;
    }
    if (o->ssd_tables && o->cache_rows == 0) {
        snprintf(err, cap, "--ssd_tables puts tables on disk behind a DRAM cache: give its size with --cache_rows N");
        return false;
    }
    if (o->cache_rows && !o->ssd_tables) {
        snprintf(err, cap, "--cache_rows sizes the cache of tables on disk: name them with --ssd_tables (or all)");
        return false;
    }
    if (o->ssd_tables && o->collisionless) {
        snprintf(err, cap, "--ssd_tables and --hash collisionless: a hashed table cannot also be on disk");
        return false;
    }
    char hashing[64];
    const char *hash_only = first_of(order, HASH_ONLY, hashing, sizeof hashing);
    if (hash_only && !o->collisionless) {
        snprintf(err, cap, "%s is an option of --hash collisionless, but hashing is modulo%s, which ignores it: "
                 "add --hash collisionless", hash_only, order[row("hash")] ? "" : " (the default)");
        return false;
    }
    if (o->hash.policy == EMBER_EVICT_TTL && o->hash.ttl_steps == 0) {
        snprintf(err, cap, "--hash_policy ttl needs --hash_ttl STEPS");
        return false;
    }
    if (order[row("hash_ttl")] && o->hash.policy != EMBER_EVICT_TTL) {
        snprintf(err, cap, "--hash_ttl is the time to live of --hash_policy ttl, but the policy is %s%s, which "
                 "ignores it: add --hash_policy ttl", ember_evict_policy_name(o->hash.policy),
                 order[row("hash_policy")] ? "" : " (the default)");
        return false;
    }
    if ((o->checkpoint_interval >= 0 || o->keep_checkpoints > 0 || o->checkpoint_delta_interval >= 0) &&
        !o->save_dir && !o->resume) {
        snprintf(err, cap, "%s saves checkpoints: give --save_dir DIR (or --resume DIR)",
                 o->checkpoint_interval >= 0 ? "--checkpoint_interval"
                 : o->keep_checkpoints > 0   ? "--keep_checkpoints"
                                             : "--checkpoint_delta_interval");
        return false;
    }
    // An option the chosen data set ignores is a mistake, not a detail: `--data_path F` alone
    // would train on synthetic data and report an AUC of it.
    const char *const given[TRAIN_DATASET_COUNT] = {synthetic_only, criteo_only, npy_only};
    for (int d = 0; d < TRAIN_DATASET_COUNT; d++) {
        if (!given[d] || d == (int)o->dataset) continue;
        snprintf(err, cap, "%s is an option of --dataset %s%s, but the dataset is %s%s, which ignores it%s%s", given[d],
                 train_dataset_name((train_dataset)d), d == TRAIN_SYNTHETIC ? " (the generated ids)" : "",
                 train_dataset_name(o->dataset),
                 order[row("dataset")] ? "" : " (the default)", d == TRAIN_SYNTHETIC ? "" : ": add --dataset ",
                 d == TRAIN_SYNTHETIC ? "" : train_dataset_name((train_dataset)d));
        return false;
    }
    if (order[row("sharding")] && o->plan_path) {
        snprintf(err, cap, "--sharding and --plan both place the tables: give one");
        return false;
    }
    return true;
}

// Parses the command line into c (defaults first, then a --preset's values, then the options
// given, wherever --preset stands among them). Returns 0 (run), 1 (--help) or 2 (bad usage: err
// says why).
static int parse(int argc, char **argv, train_cli *c, char *err, size_t cap) {
    int order[NUM_FLAGS];
    int preset = PRESET_NONE;
    for (int pass = 0; pass < 2; pass++) {
        memset(c, 0, sizeof *c);
        train_options_default(&c->o);
        if (preset == PRESET_MLPERF_DCNV2) train_options_mlperf_dcnv2(&c->o);
        const int p = cli_parse_flags(argc, argv, flags, NUM_FLAGS, c, order, err, cap);
        if (p != 0) return p;
        if (c->preset == PRESET_NONE || preset != PRESET_NONE) break;
        preset = c->preset;
    }
    return check_together(&c->o, order, err, cap) ? 0 : 2;
}

int cmd_train(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    train_cli c;
    char err[512];
    // Usage errors need no communication: every rank parses the same command line.
    const int p = parse(argc, argv, &c, err, sizeof err);
    if (p == 2) {
        if (speak) fprintf(stderr, "ember train: %s (try 'ember train --help')\n", err);
        return 2;
    }
    if (p == 1) {
        char names[256];
        cli_optim_names("|", names, sizeof names);
        if (speak) printf(help, names);
        return 0;
    }
    // The bar goes to stderr, and by default only when stderr is a terminal. Not stdout: under
    // Open MPI's mpiexec a rank's stdout is a pseudo-terminal even when mpiexec's own output goes
    // to a file, and the bar's carriage returns ended up in the log; a rank's stderr is a pipe
    // there, so under mpiexec the default is plain lines and `--progress bar` asks for the bar.
    train_options *o = &c.o;
    o->progress_bar = c.progress == PROGRESS_BAR || (c.progress == PROGRESS_AUTO && isatty(STDERR_FILENO));

    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    threads_report placement;
    ember_status st = threads_start_mpi(argc, argv, c.threads, o->timeout_s, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        o->threads_note = placement.text;
        o->loader_cpus = placement.loader_cpus[0] ? placement.loader_cpus : NULL;
        o->loader_shares_cpu = placement.loader_shares_cpu;
        train_result res = {0};
        st = train_run(comm, o, dlrm_backend_sebc_create, stdout, &res);
    }
    return threads_finish_mpi("train", st, ctx, comm);
}

const cli_flag *cmd_train_flags(int *n) {
    *n = NUM_FLAGS;
    return flags;
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_train_parse_only(int argc, char **argv) {
    train_cli c;
    char err[512];
    return parse(argc, argv, &c, err, sizeof err);
}
