// `ember ckpt info DIR [--verify]`: what a checkpoint holds, human-readable: its generation and
// writers, the trainer's configuration and position, every table and blob; --verify reads every
// record and checks its CRC-32. Local: no MPI.
#define _GNU_SOURCE // getopt_long
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "appctx.h"
#include "cli.h"
#include "commands.h"
#include "trainstate.h"

static const char help[] =
    "usage: ember ckpt info [--verify] DIR\n"
    "\n"
    "Prints what checkpoint DIR holds: the generation and the world size that wrote it, the\n"
    "configuration and position of the 'ember train' run that saved it, every table (name,\n"
    "rows x dim, optimizer, dtype, step, bytes, records) and every blob. DIR may be a save\n"
    "directory of 'ember train --save_dir': its step-* checkpoints are listed and the latest\n"
    "committed one is shown.\n"
    "\n"
    "  --verify     also read every record of every table and blob and check its CRC-32\n"
    "  -h, --help   this text\n";

static void layers(FILE *f, const int32_t *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", (int)v[i]);
}

static void print_trainer(FILE *f, const trainstate *ts) {
    const train_options *o = &ts->cfg;
    const train_position *p = &ts->pos;
    fprintf(f, "  position    step %lld: epoch %d, next batch %lld; %lld samples, %lld skipped batch%s\n",
            (long long)p->steps, (int)p->epoch, (long long)p->next_batch, (long long)p->samples,
            (long long)p->skipped_batches, p->skipped_batches == 1 ? "" : "es");
    fprintf(f, "  model       embedding dim %d, dense arch ", (int)o->embedding_dim);
    layers(f, o->bottom, o->num_bottom);
    fprintf(f, ", over arch ");
    layers(f, o->top, o->num_top);
    fprintf(f, ", %lld dense parameters\n", (long long)ts->num_dense_params);
    fprintf(f, "  rows        ");
    for (int t = 0; t < DLRM_NUM_SPARSE; t++) fprintf(f, "%s%lld", t ? "," : "", (long long)o->rows[t]);
    fputc('\n', f);
    fprintf(f, "  optimizers  dense %s lr %g (step %lld), embeddings %s lr %g; gradient convention %s\n",
            dense_optim_name(o->dense_optimizer), (double)o->learning_rate, (long long)ts->dense_step,
            ember_optim_name(o->embedding_optimizer),
            (double)(o->embedding_learning_rate > 0.0f ? o->embedding_learning_rate : o->learning_rate),
            ember_grad_convention_name(o->grad_convention));
    if (o->collisionless) {
        fprintf(f,
                "  hashing     collisionless: buckets of %d rows, a value gets a row at its occurrence %lld, %s "
                "eviction",
                (int)o->hash.bucket_rows, (long long)o->hash.min_count, ember_evict_policy_name(o->hash.policy));
        if (o->hash.policy == EMBER_EVICT_TTL) fprintf(f, " after %lld steps", (long long)o->hash.ttl_steps);
        fputc('\n', f);
    } else {
        fprintf(f, "  hashing     modulo the table's rows\n");
    }
    if (o->ssd_tables) {
        fprintf(f, "  on disk     tables");
        if (o->ssd_tables == (1u << DLRM_NUM_SPARSE) - 1) fprintf(f, " all");
        for (int t = 0, k = 0; t < DLRM_NUM_SPARSE && o->ssd_tables != (1u << DLRM_NUM_SPARSE) - 1; t++)
            if (o->ssd_tables & (1u << t)) fprintf(f, "%s%d", k++ ? "," : " ", t);
        fprintf(f, " behind %s caches of %lld rows\n", ember_evict_policy_name(o->cache_policy),
                (long long)o->cache_rows);
    }
    if (o->dataset == TRAIN_SYNTHETIC) {
        fprintf(f, "  data        synthetic, seed %llu, zipf alpha %g", (unsigned long long)o->seed, o->zipf_alpha);
        if (o->synth_items > 1) fprintf(f, ", %lld items per row", (long long)o->synth_items);
    } else if (o->dataset == TRAIN_CRITEO_NPY) {
        char days[48] = "every day but the last";
        if (o->train_days) snprintf(days, sizeof days, "days 0..%d", (int)o->train_days - 1);
        fprintf(f, "  data        criteo day files in '%s', training on %s, eval split %s, seed %llu",
                o->data_dir ? o->data_dir : "?", days, o->eval_split ? "test" : "val", (unsigned long long)o->seed);
    } else {
        fprintf(f, "  data        criteo '%s', eval %s%s%s, seed %llu", o->data_path ? o->data_path : "?",
                o->eval_data_path ? "'" : "its held-out head", o->eval_data_path ? o->eval_data_path : "",
                o->eval_data_path ? "'" : "", (unsigned long long)o->seed);
    }
    fprintf(f, "; global batch %lld, %d epoch%s of ", (long long)o->batch_size, (int)o->epochs,
            o->epochs > 1 ? "s" : "");
    if (o->limit_train_batches) fprintf(f, "%lld", (long long)o->limit_train_batches);
    else fprintf(f, "all");
    fprintf(f, " batches, eval on ");
    if (o->limit_val_batches) fprintf(f, "%lld", (long long)o->limit_val_batches);
    else fprintf(f, "all");
    fprintf(f, " batches\n");
    fprintf(f, "  saving      ");
    if (o->checkpoint_interval > 0) fprintf(f, "every %lld steps and ", (long long)o->checkpoint_interval);
    fprintf(f, "at the end, keeping the newest %d", (int)o->keep_checkpoints);
    if (o->checkpoint_delta_interval > 0)
        fprintf(f, "; deltas every %lld steps", (long long)o->checkpoint_delta_interval);
    fputc('\n', f);
    fprintf(f, "  digest      losses %016llx outputs %016llx (so far)\n", (unsigned long long)ts->digest_losses,
            (unsigned long long)ts->digest_outputs);
}

// Prints checkpoint `path`. Local.
static ember_status info(ember_ctx *ctx, const char *path, bool verify) {
    ember_checkpoint *c = NULL;
    APP_TRY(ember_checkpoint_open(ctx, path, &c));
    FILE *f = stdout;
    const int32_t world = ember_checkpoint_world_size(c);
    const int64_t gen = ember_checkpoint_generation(c), base = ember_checkpoint_base_generation(c);
    printf("checkpoint '%s': generation %lld", path, (long long)gen);
    if (base != gen) printf(" (deltas on generation %lld)", (long long)base);
    printf(", written by %d rank%s\n", (int)world, world > 1 ? "s" : "");
    trainstate ts;
    const saved_model sm = {.ckpt = c};
    ember_status st = trainstate_read(ctx, &sm, path, &ts);
    if (st == EMBER_OK) {
        print_trainer(f, &ts);
    } else if (st == EMBER_ERR_FORMAT) {
        fprintf(f, "  trainer     none readable: %s\n", ember_ctx_errmsg(ctx));
        st = EMBER_OK;
    }
    trainstate_free(&ts);
    const int32_t nt = ember_checkpoint_num_tables(c);
    fprintf(f, "tables (%d):\n", (int)nt);
    fprintf(f, "  %-16s %14s %-6s %-22s %-5s %10s %14s %8s\n", "name", "rows", "x dim", "optimizer", "dtype", "step",
            "bytes", "records");
    uint64_t total = 0;
    for (int32_t t = 0; t < nt && st == EMBER_OK; t++) {
        ember_checkpoint_table ti;
        st = ember_checkpoint_table_info(c, t, &ti);
        if (st != EMBER_OK) break;
        fprintf(f, "  %-16s %14lld x %-4d %-22s %-5s %10lld %14llu %8d\n", ti.name, (long long)ti.rows, (int)ti.dim,
                ember_optim_name(ti.optim), ember_dtype_name(ti.dtype), (long long)ti.step,
                (unsigned long long)ti.bytes, (int)ti.num_records);
        total += ti.bytes;
    }
    const int32_t nb = ember_checkpoint_num_blobs(c);
    if (st == EMBER_OK) fprintf(f, "blobs (%d):\n", (int)nb);
    for (int32_t i = 0; i < nb && st == EMBER_OK; i++) {
        const char *name = NULL;
        size_t bytes = 0;
        st = ember_checkpoint_blob_info(c, i, &name, &bytes);
        if (st != EMBER_OK) break;
        fprintf(f, "  %-16s %14zu bytes\n", name, bytes);
        total += bytes;
    }
    if (st == EMBER_OK) fprintf(f, "total %llu bytes of tables and blobs\n", (unsigned long long)total);
    if (st == EMBER_OK && verify) {
        st = ember_checkpoint_verify(c);
        if (st == EMBER_OK) {
            fprintf(f, "verify: OK, a load accepts the manifest and every record of the %d table%s and %d blob%s "
                       "matches its CRC-32\n", (int)nt,
                    nt == 1 ? "" : "s", (int)nb, nb == 1 ? "" : "s");
        }
    }
    ember_checkpoint_close(c);
    return st;
}

static ember_status info_dir(ember_ctx *ctx, const char *dir, bool verify) {
    char path[TRAINSTATE_PATH_MAX], save_dir[TRAINSTATE_PATH_MAX];
    APP_TRY(ckpt_resolve(ctx, "checkpoint", dir, path, save_dir));
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (strlen(save_dir) == len && strncmp(save_dir, dir, len) == 0) {
        // A save directory: its checkpoints, newest first.
        ckpt_entry *steps = NULL;
        int32_t n = 0;
        APP_TRY(ckpt_list(ctx, "checkpoint", save_dir, &steps, &n));
        printf("save directory '%s': %d step-* director%s:", save_dir, (int)n, n == 1 ? "y" : "ies");
        for (int32_t i = 0; i < n; i++) {
            printf("%s step %lld%s", i ? "," : "", (long long)steps[i].step,
                   steps[i].committed ? "" : " (unfinished: no manifest)");
        }
        printf("\nlatest committed: ");
        free(steps);
    }
    return info(ctx, path, verify);
}

// Parses `info [--verify] DIR`. Returns 0 (run: *dir and *verify set), 1 (--help) or 2 (bad
// usage: err holds the whole message).
static int parse(int argc, char **argv, const char **dir, bool *verify, char *err, size_t cap) {
    static const struct option lo[] = {
        {"verify", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return 1;
    if (argc < 2 || strcmp(argv[1], "info") != 0) {
        snprintf(err, cap, "ember ckpt: %s%s%s (try 'ember ckpt --help')",
                 argc < 2 ? "expected a command: info" : "unknown command '", argc < 2 ? "" : argv[1],
                 argc < 2 ? "" : "', expected info");
        return 2;
    }
    argc--;
    argv++;
    *verify = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (c == 'v') {
            *verify = true;
        } else if (c == 'h') {
            return 1;
        } else {
            snprintf(err, cap, "ember ckpt info: unknown option '%s' (try 'ember ckpt --help')", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc - 1) {
        snprintf(err, cap, "ember ckpt info: expected one directory (try 'ember ckpt --help')");
        return 2;
    }
    *dir = argv[optind];
    return 0;
}

int cmd_ckpt(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    const char *dir = NULL;
    bool verify = false;
    char err[512];
    const int p = parse(argc, argv, &dir, &verify, err, sizeof err);
    if (p == 1) {
        if (speak) fputs(help, stdout);
        return 0;
    }
    if (p != 0) {
        if (speak) fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (!speak) return 0; // one process reads and prints; the others of a launch wait in cli_exit
    ember_ctx *ctx = NULL;
    ember_status st = ember_ctx_create(NULL, &ctx);
    if (st == EMBER_OK) st = info_dir(ctx, dir, verify);
    if (st != EMBER_OK) {
        fflush(stdout);
        fprintf(stderr, "ember ckpt info: error: %s\n", ctx ? ember_ctx_errmsg(ctx) : ember_status_str(st));
    }
    ember_ctx_destroy(ctx);
    return st == EMBER_OK ? 0 : 1;
}

// fuzz/fuzz_cli.c: the option parsing alone (no checkpoint read, no output): 0 run, 1 --help, 2 bad usage.
int cmd_ckpt_parse_only(int argc, char **argv) {
    const char *dir = NULL;
    bool verify = false;
    char err[512];
    return parse(argc, argv, &dir, &verify, err, sizeof err);
}
