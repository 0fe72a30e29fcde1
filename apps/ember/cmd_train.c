// `ember train`: command line -> train_options -> train_run on the sharded embedding collection.
#define _GNU_SOURCE // getopt_long
#include <getopt.h>
#include <stdio.h>
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
    "ranks, pairwise dot interaction, a top MLP and BCE loss; the dense part is data parallel.\n"
    "Defaults train the built-in synthetic set and end with the eval AUC beside the planted\n"
    "model's (the best achievable). Flag names follow TorchRec's examples/dlrm/dlrm_main.py.\n"
    "\n"
    "model:\n"
    "  --embedding_dim N                 embedding width D, all tables (default 16)\n"
    "  --num_embeddings N                rows of every table (TorchRec's flag)\n"
    "  --num_embeddings_per_feature L    rows per table: 26 comma-separated values, or one for all\n"
    "                                    (default: 26 sizes from 4 to 100000, see docs/dlrm.md)\n"
    "  --dense_arch_layer_sizes L        bottom MLP layer sizes, last = embedding_dim (default 64,16)\n"
    "  --over_arch_layer_sizes L         top MLP layer sizes, last = 1 (default 64,32,1)\n"
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
    "  --grad_convention mean|sum        objective over ranks: mean (default) or sum of rank losses\n"
    "  --wire_precision P[,Q]            fp32 (default, exact), fp16 or bf16: pooled embeddings (P)\n"
    "                                    and their gradients (Q, default P) between ranks, rounded\n"
    "                                    to nearest even; an fp16 overflow stops the step (docs/sharding.md)\n"
    "\n"
    "data:\n"
    "  --dataset synthetic|criteo        (default synthetic)\n"
    "  --data_path FILE                  criteo: training TSV (label, 13 integers, 26 hex categoricals)\n"
    "  --eval_data_path FILE             criteo: eval TSV (default: hold out the first\n"
    "                                    --limit_val_batches batches of --data_path)\n"
    "  --zipf_alpha X                    synthetic: Zipf exponent of the ids (default 1.2)\n"
    "  --malformed skip|fatal            criteo: skip and count malformed lines, or stop (default skip)\n"
    "                                    (the options of one dataset are refused with the other; a\n"
    "                                    file without a usable line stops the run)\n"
    "\n"
    "training:\n"
    "  --batch_size N                    global batch, split over the ranks (default 2048)\n"
    "  --epochs N                        passes over the training data (default 1)\n"
    "  --limit_train_batches N           global batches per epoch; synthetic: the training set size\n"
    "                                    (default 1000; 0 = whole file for criteo)\n"
    "  --limit_val_batches N             eval global batches (default 16; 0 = whole file for criteo)\n"
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
    "  --hash_bucket_rows N              collisionless: rows per hash bucket (default 16)\n"
    "  --synth_items K                   synthetic: K distinct items per table row, each a 64-bit\n"
    "                                    value (default 1: the items are the rows)\n"
    "\n"
    "checkpoints (docs/dlrm.md, Resume):\n"
    "  --save_dir DIR                    save DIR/step-<step, 10 digits>/ (tables, dense parameters,\n"
    "                                    optimizer state, data position) every --checkpoint_interval\n"
    "                                    steps and at the end\n"
    "  --checkpoint_interval N           steps between checkpoints (default 0: only at the end)\n"
    "  --keep_checkpoints K              keep the newest K checkpoints in DIR (default 3)\n"
    "  --resume DIR                      go on from the latest committed checkpoint of save directory\n"
    "                                    DIR (or from checkpoint directory DIR) to the configured end;\n"
    "                                    the model must be the same, the batch limits and epochs may\n"
    "                                    grow. Without --save_dir, saving goes on into DIR's save\n"
    "                                    directory with the checkpoint's interval and count\n"
    "\n"
    "output (rank 0):\n"
    "  --metrics FILE.csv|FILE.jsonl     one row per evaluation: step, epoch, samples, train loss,\n"
    "                                    eval loss, eval AUC, planted AUC, samples/s\n"
    "  --plot FILE.png                   loss and AUC curves, drawn by gnuplot (FILE.png.gp is kept)\n"
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

enum {
    OPT_EMBEDDING_DIM = 256,
    OPT_NUM_EMBEDDINGS,
    OPT_NUM_EMBEDDINGS_PER_FEATURE,
    OPT_DENSE_ARCH,
    OPT_OVER_ARCH,
    OPT_SHARDING,
    OPT_PLAN,
    OPT_INTRA_GBPS,
    OPT_INTER_GBPS,
    OPT_GRAD_CONVENTION,
    OPT_DATASET,
    OPT_DATA_PATH,
    OPT_EVAL_DATA_PATH,
    OPT_ZIPF_ALPHA,
    OPT_MALFORMED,
    OPT_BATCH_SIZE,
    OPT_EPOCHS,
    OPT_LIMIT_TRAIN,
    OPT_LIMIT_VAL,
    OPT_EVAL_INTERVAL,
    OPT_LEARNING_RATE,
    OPT_EMBEDDING_LEARNING_RATE,
    OPT_ADAGRAD,
    OPT_DENSE_OPTIMIZER,
    OPT_EMBEDDING_OPTIMIZER,
    OPT_SEED,
    OPT_THREADS,
    OPT_METRICS,
    OPT_PLOT,
    OPT_PROGRESS,
    OPT_DIGEST,
    OPT_SAVE_DIR,
    OPT_CHECKPOINT_INTERVAL,
    OPT_KEEP_CHECKPOINTS,
    OPT_RESUME,
    OPT_TIMEOUT,
    OPT_WIRE_PRECISION,
    OPT_OVERLAP,
    OPT_SSD_TABLES,
    OPT_CACHE_ROWS,
    OPT_CACHE_POLICY,
    OPT_SSD_DIR,
    OPT_HASH,
    OPT_HASH_MIN_COUNT,
    OPT_HASH_POLICY,
    OPT_HASH_TTL,
    OPT_HASH_BUCKET_ROWS,
    OPT_SYNTH_ITEMS,
};

static const struct option options[] = {
    {"embedding_dim", required_argument, NULL, OPT_EMBEDDING_DIM},
    {"num_embeddings", required_argument, NULL, OPT_NUM_EMBEDDINGS},
    {"num_embeddings_per_feature", required_argument, NULL, OPT_NUM_EMBEDDINGS_PER_FEATURE},
    {"dense_arch_layer_sizes", required_argument, NULL, OPT_DENSE_ARCH},
    {"over_arch_layer_sizes", required_argument, NULL, OPT_OVER_ARCH},
    {"sharding", required_argument, NULL, OPT_SHARDING},
    {"plan", required_argument, NULL, OPT_PLAN},
    {"intra_gbps", required_argument, NULL, OPT_INTRA_GBPS},
    {"inter_gbps", required_argument, NULL, OPT_INTER_GBPS},
    {"grad_convention", required_argument, NULL, OPT_GRAD_CONVENTION},
    {"dataset", required_argument, NULL, OPT_DATASET},
    {"data_path", required_argument, NULL, OPT_DATA_PATH},
    {"eval_data_path", required_argument, NULL, OPT_EVAL_DATA_PATH},
    {"zipf_alpha", required_argument, NULL, OPT_ZIPF_ALPHA},
    {"malformed", required_argument, NULL, OPT_MALFORMED},
    {"batch_size", required_argument, NULL, OPT_BATCH_SIZE},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"limit_train_batches", required_argument, NULL, OPT_LIMIT_TRAIN},
    {"limit_val_batches", required_argument, NULL, OPT_LIMIT_VAL},
    {"eval_interval", required_argument, NULL, OPT_EVAL_INTERVAL},
    {"learning_rate", required_argument, NULL, OPT_LEARNING_RATE},
    {"embedding_learning_rate", required_argument, NULL, OPT_EMBEDDING_LEARNING_RATE},
    {"adagrad", no_argument, NULL, OPT_ADAGRAD},
    {"dense_optimizer", required_argument, NULL, OPT_DENSE_OPTIMIZER},
    {"embedding_optimizer", required_argument, NULL, OPT_EMBEDDING_OPTIMIZER},
    {"seed", required_argument, NULL, OPT_SEED},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"progress", required_argument, NULL, OPT_PROGRESS},
    {"digest", no_argument, NULL, OPT_DIGEST},
    {"save_dir", required_argument, NULL, OPT_SAVE_DIR},
    {"checkpoint_interval", required_argument, NULL, OPT_CHECKPOINT_INTERVAL},
    {"keep_checkpoints", required_argument, NULL, OPT_KEEP_CHECKPOINTS},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"timeout_s", required_argument, NULL, OPT_TIMEOUT},
    {"wire_precision", required_argument, NULL, OPT_WIRE_PRECISION},
    {"overlap", required_argument, NULL, OPT_OVERLAP},
    {"ssd_tables", required_argument, NULL, OPT_SSD_TABLES},
    {"cache_rows", required_argument, NULL, OPT_CACHE_ROWS},
    {"cache_policy", required_argument, NULL, OPT_CACHE_POLICY},
    {"ssd_dir", required_argument, NULL, OPT_SSD_DIR},
    {"hash", required_argument, NULL, OPT_HASH},
    {"hash_min_count", required_argument, NULL, OPT_HASH_MIN_COUNT},
    {"hash_policy", required_argument, NULL, OPT_HASH_POLICY},
    {"hash_ttl", required_argument, NULL, OPT_HASH_TTL},
    {"hash_bucket_rows", required_argument, NULL, OPT_HASH_BUCKET_ROWS},
    {"synth_items", required_argument, NULL, OPT_SYNTH_ITEMS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

#define MAX_INT32 2147483647
#define MAX_ROWS ((int64_t)1 << 48)

static bool parse_layers(const char *flag, const char *text, int32_t *sizes, int32_t *n, char *err, size_t cap) {
    int64_t v[TRAIN_MAX_LAYERS];
    int k;
    if (!cli_parse_i64_list(flag, text, 1, 65536, v, TRAIN_MAX_LAYERS, &k, err, cap)) return false;
    for (int i = 0; i < k; i++) sizes[i] = (int32_t)v[i];
    *n = k;
    return true;
}

// --wire_precision P or P,Q: fp32, fp16 or bf16 each.
static bool parse_wire_precision(const char *text, ember_dtype *fwd, ember_dtype *bwd, char *err, size_t cap) {
    char a[8] = "", b[8] = "";
    const char *comma = strchr(text, ',');
    const size_t n = comma ? (size_t)(comma - text) : strlen(text);
    if (n < sizeof a) memcpy(a, text, n), a[n] = '\0';
    if (comma && strlen(comma + 1) < sizeof b) strcpy(b, comma + 1);
    if (n >= sizeof a || ember_dtype_parse(a, fwd) != 0 || (comma ? ember_dtype_parse(b, bwd) != 0 : (*bwd = *fwd, 0))) {
        snprintf(err, cap, "--wire_precision '%s': expected fp32, fp16 or bf16, or two of them comma-separated", text);
        return false;
    }
    return true;
}

// One value for all 26 features, or 26 values.
static bool parse_per_feature(const char *flag, int count, int got, char *err, size_t cap) {
    if (got == 1 || got == count) return true;
    snprintf(err, cap, "%s: %d values given, expected 1 (for every feature) or %d", flag, got, count);
    return false;
}

static bool parse_sharding(const char *text, int *sharding, char *err, size_t cap) {
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

// --ssd_tables all, or table indices / names (t_cat_3) comma-separated: a bit per table.
static bool parse_tables(const char *flag, const char *text, uint32_t *mask, char *err, size_t cap) {
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
            char num[8];
            snprintf(num, sizeof num, "%d", t);
            if (((int)strlen(name) == len && !strncmp(p, name, (size_t)len)) ||
                ((int)strlen(num) == len && !strncmp(p, num, (size_t)len)))
                f = t;
        }
        if (f < 0) {
            snprintf(err, cap, "%s '%.*s': not a table (all, 0..%d or t_cat_0..t_cat_%d)", flag, len, p,
                     DLRM_NUM_SPARSE - 1, DLRM_NUM_SPARSE - 1);
            return false;
        }
        *mask |= 1u << f;
        if (!comma) return true;
        p = comma + 1;
    }
}

// Picks `text` out of names[0..n); -1 if absent.
static int pick(const char *text, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        if (strcmp(text, names[i]) == 0) return i;
    }
    return -1;
}

// Parses the options into o. Returns false with a message in err on bad usage.
static bool parse(int argc, char **argv, train_options *o, int32_t *threads, int *progress_mode, bool *want_help,
                  char *err, size_t cap) {
    static const char *const datasets[] = {"synthetic", "criteo"}, *const conventions[] = {"mean", "sum"},
                             *const malformed[] = {"skip", "fatal"}, *const dense_opts[] = {"sgd", "adagrad", "adam"},
                             *const progress[] = {"auto", "bar", "lines"};
    int64_t v, list[DLRM_NUM_SPARSE];
    double x;
    int n, c, k, idx = -1;
    char flag[64];
    const char *choices = "";
    char optim_names[256];
    bool sharding_given = false, dataset_given = false;
    const char *criteo_only = NULL, *synthetic_only = NULL; // the first such option given
    opterr = 0; // messages are ours, printed once
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", options, &idx)) != -1) {
        // The option as the user wrote it, for messages.
        if (c != '?' && c != ':' && idx >= 0) snprintf(flag, sizeof flag, "--%s", options[idx].name);
        else if (optopt > 0 && optopt < 256) snprintf(flag, sizeof flag, "-%c", optopt);
        else snprintf(flag, sizeof flag, "%s", argv[optind - 1]);
        idx = -1;
        switch (c) {
        case 'h': *want_help = true; return true;
        case OPT_EMBEDDING_DIM:
            if (!cli_parse_i64("--embedding_dim", optarg, 1, 65536, &v, err, cap)) return false;
            o->embedding_dim = (int32_t)v;
            break;
        case OPT_NUM_EMBEDDINGS:
            if (!cli_parse_i64("--num_embeddings", optarg, 1, MAX_ROWS, &v, err, cap)) return false;
            for (int f = 0; f < DLRM_NUM_SPARSE; f++) o->rows[f] = v;
            break;
        case OPT_NUM_EMBEDDINGS_PER_FEATURE:
            if (!cli_parse_i64_list("--num_embeddings_per_feature", optarg, 1, MAX_ROWS, list, DLRM_NUM_SPARSE, &n,
                                    err, cap) ||
                !parse_per_feature("--num_embeddings_per_feature", DLRM_NUM_SPARSE, n, err, cap)) {
                return false;
            }
            for (int f = 0; f < DLRM_NUM_SPARSE; f++) o->rows[f] = list[n == 1 ? 0 : f];
            break;
        case OPT_DENSE_ARCH:
            if (!parse_layers("--dense_arch_layer_sizes", optarg, o->bottom, &o->num_bottom, err, cap)) return false;
            break;
        case OPT_OVER_ARCH:
            if (!parse_layers("--over_arch_layer_sizes", optarg, o->top, &o->num_top, err, cap)) return false;
            break;
        case OPT_SHARDING:
            if (!parse_sharding(optarg, o->sharding, err, cap)) return false;
            sharding_given = true;
            break;
        case OPT_PLAN: o->plan_path = optarg; break;
        case OPT_INTRA_GBPS:
        case OPT_INTER_GBPS: {
            const char *gflag = c == OPT_INTRA_GBPS ? "--intra_gbps" : "--inter_gbps";
            double *g = c == OPT_INTRA_GBPS ? &o->intra_gbps : &o->inter_gbps;
            if (!cli_parse_double(gflag, optarg, g, err, cap)) return false;
            if (!(*g > 0 && *g < 1e9)) {
                snprintf(err, cap, "%s %.64s: expected Gbit/s > 0", gflag, optarg);
                return false;
            }
            break;
        }
        case OPT_GRAD_CONVENTION:
            if ((k = pick(optarg, conventions, 2)) < 0) {
                choices = "mean, sum";
                goto bad_choice;
            }
            o->grad_convention = k == 0 ? EMBER_GRAD_MEAN : EMBER_GRAD_SUM;
            break;
        case OPT_DATASET:
            if ((k = pick(optarg, datasets, 2)) < 0) {
                choices = "synthetic, criteo";
                goto bad_choice;
            }
            o->dataset = k == 0 ? TRAIN_SYNTHETIC : TRAIN_CRITEO;
            dataset_given = true;
            break;
        case OPT_DATA_PATH:
            o->data_path = optarg;
            if (!criteo_only) criteo_only = "--data_path";
            break;
        case OPT_EVAL_DATA_PATH:
            o->eval_data_path = optarg;
            if (!criteo_only) criteo_only = "--eval_data_path";
            break;
        case OPT_ZIPF_ALPHA:
            if (!cli_parse_double("--zipf_alpha", optarg, &o->zipf_alpha, err, cap)) return false;
            if (!synthetic_only) synthetic_only = "--zipf_alpha";
            break;
        case OPT_MALFORMED:
            if ((k = pick(optarg, malformed, 2)) < 0) {
                choices = "skip, fatal";
                goto bad_choice;
            }
            o->malformed = k == 0 ? CRITEO_SKIP : CRITEO_FATAL;
            if (!criteo_only) criteo_only = "--malformed";
            break;
        case OPT_BATCH_SIZE:
            if (!cli_parse_i64("--batch_size", optarg, 1, (int64_t)1 << 40, &o->batch_size, err, cap)) return false;
            break;
        case OPT_EPOCHS:
            if (!cli_parse_i64("--epochs", optarg, 1, MAX_INT32, &v, err, cap)) return false;
            o->epochs = (int32_t)v;
            break;
        case OPT_LIMIT_TRAIN:
            if (!cli_parse_i64("--limit_train_batches", optarg, 0, (int64_t)1 << 40, &o->limit_train_batches, err,
                               cap)) {
                return false;
            }
            break;
        case OPT_LIMIT_VAL:
            if (!cli_parse_i64("--limit_val_batches", optarg, 0, (int64_t)1 << 40, &o->limit_val_batches, err, cap)) {
                return false;
            }
            break;
        case OPT_EVAL_INTERVAL:
            if (!cli_parse_i64("--eval_interval", optarg, 0, (int64_t)1 << 40, &o->eval_interval, err, cap)) {
                return false;
            }
            break;
        case OPT_LEARNING_RATE:
            if (!cli_parse_double("--learning_rate", optarg, &x, err, cap)) return false;
            o->learning_rate = (float)x;
            break;
        case OPT_EMBEDDING_LEARNING_RATE:
            if (!cli_parse_double("--embedding_learning_rate", optarg, &x, err, cap)) return false;
            o->embedding_learning_rate = (float)x;
            break;
        case OPT_ADAGRAD:
            o->dense_optimizer = DENSE_OPT_ADAGRAD;
            o->embedding_optimizer = EMBER_OPT_ROWWISE_ADAGRAD;
            break;
        case OPT_DENSE_OPTIMIZER:
            if ((k = pick(optarg, dense_opts, 3)) < 0) {
                choices = "sgd, adagrad, adam";
                goto bad_choice;
            }
            o->dense_optimizer = (dense_optim_kind)k;
            break;
        case OPT_EMBEDDING_OPTIMIZER:
            if (ember_optim_parse(optarg, &o->embedding_optimizer) != EMBER_OK) {
                cli_optim_names(", ", optim_names, sizeof optim_names);
                choices = optim_names;
                goto bad_choice;
            }
            break;
        case OPT_SEED:
            if (!cli_parse_i64("--seed", optarg, 0, INT64_MAX, &v, err, cap)) return false;
            o->seed = (uint64_t)v;
            break;
        case OPT_THREADS:
            if (!cli_parse_i64("--threads", optarg, 0, 4096, &v, err, cap)) return false;
            *threads = (int32_t)v;
            break;
        case OPT_METRICS: o->metrics_path = optarg; break;
        case OPT_PLOT: o->plot_path = optarg; break;
        case OPT_DIGEST: o->digest = true; break;
        case OPT_SAVE_DIR: o->save_dir = optarg; break;
        case OPT_RESUME: o->resume = optarg; break;
        case OPT_TIMEOUT:
            if (!cli_parse_timeout(optarg, &o->timeout_s, err, cap)) return false;
            break;
        case OPT_WIRE_PRECISION:
            if (!parse_wire_precision(optarg, &o->wire_forward, &o->wire_backward, err, cap)) return false;
            break;
        case OPT_SSD_TABLES:
            if (!parse_tables("--ssd_tables", optarg, &o->ssd_tables, err, cap)) return false;
            break;
        case OPT_CACHE_ROWS:
            if (!cli_parse_i64("--cache_rows", optarg, 1, MAX_ROWS, &o->cache_rows, err, cap)) return false;
            break;
        case OPT_CACHE_POLICY:
        case OPT_HASH_POLICY: {
            ember_evict_policy p;
            const bool cache = c == OPT_CACHE_POLICY;
            if (ember_evict_policy_parse(optarg, &p) != EMBER_OK || (cache && p == EMBER_EVICT_TTL)) {
                choices = cache ? "lru, lfu" : "lru, lfu, ttl";
                goto bad_choice;
            }
            if (cache) o->cache_policy = p;
            else o->hash.policy = p;
            break;
        }
        case OPT_SSD_DIR: o->ssd_dir = optarg; break;
        case OPT_HASH:
            if (strcmp(optarg, "modulo") != 0 && strcmp(optarg, "collisionless") != 0) {
                choices = "modulo, collisionless";
                goto bad_choice;
            }
            o->collisionless = optarg[0] == 'c';
            break;
        case OPT_HASH_MIN_COUNT:
            if (!cli_parse_i64("--hash_min_count", optarg, 1, (int64_t)1 << 40, &o->hash.min_count, err, cap)) return false;
            break;
        case OPT_HASH_TTL:
            if (!cli_parse_i64("--hash_ttl", optarg, 1, (int64_t)1 << 40, &o->hash.ttl_steps, err, cap)) return false;
            break;
        case OPT_HASH_BUCKET_ROWS:
            if (!cli_parse_i64("--hash_bucket_rows", optarg, 1, 1 << 20, &v, err, cap)) return false;
            o->hash.bucket_rows = (int32_t)v;
            break;
        case OPT_SYNTH_ITEMS:
            if (!cli_parse_i64("--synth_items", optarg, 1, 1 << 20, &o->synth_items, err, cap)) return false;
            break;
        case OPT_OVERLAP:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                snprintf(err, cap, "--overlap: '%s' is not on or off", optarg);
                return false;
            }
            o->overlap = optarg[1] == 'n';
            break;
        case OPT_CHECKPOINT_INTERVAL:
            if (!cli_parse_i64("--checkpoint_interval", optarg, 0, (int64_t)1 << 40, &o->checkpoint_interval, err,
                               cap)) {
                return false;
            }
            break;
        case OPT_KEEP_CHECKPOINTS:
            if (!cli_parse_i64("--keep_checkpoints", optarg, 1, MAX_INT32, &v, err, cap)) return false;
            o->keep_checkpoints = (int32_t)v;
            break;
        case OPT_PROGRESS:
            if ((k = pick(optarg, progress, 3)) < 0) {
                choices = "auto, bar, lines";
                goto bad_choice;
            }
            *progress_mode = k;
            break;
        case ':': snprintf(err, cap, "%s needs a value", flag); return false;
        default: snprintf(err, cap, "unknown option '%s'", flag); return false;
        }
        continue;
    bad_choice:
        snprintf(err, cap, "%s '%s': expected one of %s", flag, optarg, choices);
        return false;
    }
    if (optind < argc) {
        snprintf(err, cap, "unexpected argument '%s'", argv[optind]);
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
    if (o->hash.policy == EMBER_EVICT_TTL && o->hash.ttl_steps == 0) {
        snprintf(err, cap, "--hash_policy ttl needs --hash_ttl STEPS");
        return false;
    }
    if ((o->checkpoint_interval >= 0 || o->keep_checkpoints > 0) && !o->save_dir && !o->resume) {
        snprintf(err, cap, "%s saves checkpoints: give --save_dir DIR (or --resume DIR)",
                 o->checkpoint_interval >= 0 ? "--checkpoint_interval" : "--keep_checkpoints");
        return false;
    }
    // An option the chosen data set ignores is a mistake, not a detail: `--data_path F` alone
    // would train on synthetic data and report an AUC of it.
    if (o->dataset == TRAIN_SYNTHETIC && criteo_only) {
        snprintf(err, cap, "%s is an option of --dataset criteo, but the dataset is synthetic%s, which ignores it: "
                 "add --dataset criteo", criteo_only, dataset_given ? "" : " (the default)");
        return false;
    }
    if (o->dataset == TRAIN_CRITEO && synthetic_only) {
        snprintf(err, cap, "%s is an option of --dataset synthetic (the generated ids), but the dataset is criteo, "
                 "which ignores it", synthetic_only);
        return false;
    }
    if (sharding_given && o->plan_path) {
        snprintf(err, cap, "--sharding and --plan both place the tables: give one");
        return false;
    }
    return true;
}

int cmd_train(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    train_options o;
    train_options_default(&o);
    int32_t threads = 0;
    int progress_mode = 0; // auto, bar, lines
    bool want_help = false;
    char err[512];
    // Usage errors need no communication: every rank parses the same command line.
    if (!parse(argc, argv, &o, &threads, &progress_mode, &want_help, err, sizeof err)) {
        if (speak) fprintf(stderr, "ember train: %s (try 'ember train --help')\n", err);
        return 2;
    }
    if (want_help) {
        char names[256];
        cli_optim_names("|", names, sizeof names);
        if (speak) printf(help, names);
        return 0;
    }
    // The bar goes to stderr, and by default only when stderr is a terminal. Not stdout: under
    // Open MPI's mpiexec a rank's stdout is a pseudo-terminal even when mpiexec's own output goes
    // to a file, and the bar's carriage returns ended up in the log; a rank's stderr is a pipe
    // there, so under mpiexec the default is plain lines and `--progress bar` asks for the bar.
    o.progress_bar = progress_mode == 1 || (progress_mode == 0 && isatty(STDERR_FILENO));

    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    threads_report placement;
    ember_status st = threads_start_mpi(argc, argv, threads, o.timeout_s, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        o.threads_note = placement.text;
        train_result res = {0};
        st = train_run(comm, &o, dlrm_backend_sebc_create, stdout, &res);
    }
    return threads_finish_mpi("train", st, ctx, comm);
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_train_parse_only(int argc, char **argv) {
    train_options o;
    train_options_default(&o);
    int32_t threads = 0;
    int progress_mode = 0;
    bool want_help = false;
    char err[512];
    if (!parse(argc, argv, &o, &threads, &progress_mode, &want_help, err, sizeof err)) return 2;
    return want_help ? 1 : 0;
}
