// `ember plan`: prints the planner's placement (include/ember/plan.h) for a DLRM-shaped set of
// tables, one per feature, with the per-rank storage and step bytes it estimates, and writes it
// as a plan file for `ember train --plan`. Local: no MPI.
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "ember.h"
#include "planfile.h"
#include "sharding.h"
#include "train.h"

#define PLAN_MAX_TABLES 256

static void usage(FILE *f) {
    char names[256];
    cli_optim_names("|", names, sizeof names);
    fprintf(f,
            "usage: ember plan [options]\n"
            "  --num_embeddings_per_feature L   rows of each table, comma list (one table per feature;\n"
            "                                   default: the 26 tables of 'ember train')\n"
            "  --num_embeddings N               rows of every one of the 26 tables of 'ember train'\n"
            "  --embedding_dim D                columns of every table (default 16)\n"
            "  --world_size W                   ranks to plan for, 1 to 65536 (default 2)\n"
            "  --batch_size B                   global batch; each rank holds B / W (default 2048)\n"
            "  --pooling_factor P               ids per sample of every feature (default 1)\n"
            "  --memory_per_rank BYTES          embedding storage budget per rank (default: no limit)\n"
            "  --embedding_optimizer NAME       the tables' optimizer, whose state the storage estimate\n"
            "                                   counts (default rowwise_adagrad, as 'ember train'), one of\n"
            "                                   %s\n"
            "  --adagrad                        --embedding_optimizer rowwise_adagrad\n"
            "  --output FILE                    also write the plan as JSON, for 'ember train --plan FILE'\n"
            "  --ranks_per_host N               ranks [h*N, (h+1)*N) share host h (default: all on one)\n"
            "  --intra_gbps G                   Gbit/s between ranks of a host: plan on predicted time\n"
            "                                   (default: on bytes; needed with more than one host)\n"
            "  --inter_gbps G                   Gbit/s of each host's link to the others\n"
            "  --mem_gbps G                     Gbit/s of embedding rows one rank pools and updates\n"
            "                                   (default 16)\n"
            "  --round_ms T                     ms of one collective round over all ranks (default 0)\n"
            "  --grid                           also offer grid sharding\n"
            "  --sharding S                     no planning: every table as S (dp, tw, cw, rw, twrw, grid;\n"
            "                                   placed as 'ember train --sharding S', twrw groups of\n"
            "                                   --ranks_per_host) and the planner's estimate of it\n"
            "Prints one line per table (name, scheme, ranks), then each rank's storage, bytes per step\n"
            "(of which to other hosts) and, with bandwidths, its predicted seconds per step and the\n"
            "predicted step time (the slowest rank's).\n"
            "Tables are named t_cat_0, t_cat_1, ... as in 'ember train'; with the same sizes, world and\n"
            "batch, 'ember train --sharding auto' places them the same way.\n",
            names);
}

typedef struct plan_args {
    int64_t rows[PLAN_MAX_TABLES], dim, world, batch, memory;
    double pooling;
    int ntables;
    ember_optim_kind optim;
    const char *output;
    int64_t ranks_per_host;
    double intra_gbps, inter_gbps, mem_gbps, round_ms;
    int grid;
    int sharding; // SHARDING_AUTO or a scheme for every table
} plan_args;

// Parses the options into a (defaults first). Returns 0 (run), 1 (--help) or 2 (bad usage: err
// holds the message after "ember plan: ").
static int parse(int argc, char **argv, plan_args *a, char *err, size_t cap) {
    static const struct option lo[] = {{"num_embeddings_per_feature", 1, 0, 'n'},
                                       {"embedding_dim", 1, 0, 'd'},
                                       {"world_size", 1, 0, 'w'},
                                       {"batch_size", 1, 0, 'b'},
                                       {"pooling_factor", 1, 0, 'p'},
                                       {"memory_per_rank", 1, 0, 'm'},
                                       {"num_embeddings", 1, 0, 'N'},
                                       {"adagrad", 0, 0, 'a'},
                                       {"embedding_optimizer", 1, 0, 'e'},
                                       {"output", 1, 0, 'o'},
                                       {"ranks_per_host", 1, 0, 'R'},
                                       {"intra_gbps", 1, 0, 'I'},
                                       {"inter_gbps", 1, 0, 'X'},
                                       {"mem_gbps", 1, 0, 'M'},
                                       {"round_ms", 1, 0, 'T'},
                                       {"grid", 0, 0, 'g'},
                                       {"sharding", 1, 0, 's'},
                                       {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    train_options defaults;
    train_options_default(&defaults);
    *a = (plan_args){.dim = defaults.embedding_dim, .world = 2, .batch = defaults.batch_size, .memory = 0,
                     .pooling = 1.0, .ntables = DLRM_NUM_SPARSE, .optim = defaults.embedding_optimizer,
                     .sharding = SHARDING_AUTO};
    memcpy(a->rows, defaults.rows, sizeof defaults.rows);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'n':
            ok = cli_parse_i64_list("--num_embeddings_per_feature", optarg, 1, INT64_MAX / 4, a->rows, PLAN_MAX_TABLES,
                                    &a->ntables, err, cap);
            break;
        case 'd': ok = cli_parse_i64("--embedding_dim", optarg, 1, 1 << 20, &a->dim, err, cap); break;
        case 'w': ok = cli_parse_i64("--world_size", optarg, 1, 65536, &a->world, err, cap); break;
        case 'b': ok = cli_parse_i64("--batch_size", optarg, 1, 1 << 30, &a->batch, err, cap); break;
        case 'p':
            ok = cli_parse_double("--pooling_factor", optarg, &a->pooling, err, cap);
            if (ok && !(a->pooling > 0)) {
                snprintf(err, cap, "--pooling_factor must be > 0");
                ok = false;
            }
            break;
        case 'm': ok = cli_parse_i64("--memory_per_rank", optarg, 0, INT64_MAX, &a->memory, err, cap); break;
        case 'N':
            ok = cli_parse_i64("--num_embeddings", optarg, 1, INT64_MAX / 4, &a->rows[0], err, cap);
            for (int t = 1; t < DLRM_NUM_SPARSE; t++) a->rows[t] = a->rows[0];
            a->ntables = DLRM_NUM_SPARSE;
            break;
        case 'a': a->optim = EMBER_OPT_ROWWISE_ADAGRAD; break;
        case 'e':
            if (ember_optim_parse(optarg, &a->optim) != EMBER_OK) {
                char names[256];
                cli_optim_names(", ", names, sizeof names);
                snprintf(err, cap, "--embedding_optimizer '%.64s': expected one of %s", optarg, names);
                ok = false;
            }
            break;
        case 'o': a->output = optarg; break;
        case 'R': ok = cli_parse_i64("--ranks_per_host", optarg, 1, 65536, &a->ranks_per_host, err, cap); break;
        case 'I':
        case 'X':
        case 'M': {
            const char *name = c == 'I' ? "--intra_gbps" : c == 'X' ? "--inter_gbps" : "--mem_gbps";
            double *v = c == 'I' ? &a->intra_gbps : c == 'X' ? &a->inter_gbps : &a->mem_gbps;
            ok = cli_parse_double(name, optarg, v, err, cap);
            if (ok && !(*v > 0 && *v < 1e9)) {
                snprintf(err, cap, "%s %.64s: expected Gbit/s > 0", name, optarg);
                ok = false;
            }
            break;
        }
        case 'T':
            ok = cli_parse_double("--round_ms", optarg, &a->round_ms, err, cap);
            if (ok && !(a->round_ms >= 0 && a->round_ms < 1e6)) {
                snprintf(err, cap, "--round_ms %.64s: expected ms >= 0", optarg);
                ok = false;
            }
            break;
        case 'g': a->grid = 1; break;
        case 's':
            a->sharding = sharding_parse(optarg);
            if (a->sharding < 0) {
                snprintf(err, cap, "--sharding '%.64s': expected dp, tw, cw, rw, twrw or grid", optarg);
                ok = false;
            }
            break;
        case 'h': return 1;
        default:
            snprintf(err, cap, "unknown option '%s' (try 'ember plan --help')", argv[optind - 1]);
            return 2;
        }
        if (!ok) return 2;
    }
    return 0;
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    char err[512];
    const int p = parse(argc, argv, &a, err, sizeof err);
    if (p == 1) {
        usage(stdout);
        return 0;
    }
    if (p != 0) {
        fprintf(stderr, "ember plan: %s\n", err);
        return 2;
    }
    const int64_t *rows = a.rows, dim = a.dim, world = a.world, batch = a.batch, memory = a.memory;
    const double pooling = a.pooling;
    const int ntables = a.ntables;
    const ember_optim_kind optim = a.optim;
    const char *output = a.output;
    ember_table_config tables[PLAN_MAX_TABLES];
    ember_feature_config features[PLAN_MAX_TABLES];
    float pf[PLAN_MAX_TABLES];
    char names[PLAN_MAX_TABLES][16];
    for (int t = 0; t < ntables; t++) {
        sharding_table_name(t, names[t], sizeof names[t]);
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = optim;
        tables[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tables[t].name = names[t], tables[t].rows = rows[t], tables[t].dim = (int32_t)dim;
        tables[t].init = (ember_init){.kind = EMBER_INIT_ZEROS}, tables[t].optim = o;
        features[t] = (ember_feature_config){.name = names[t], .table = t};
        pf[t] = (float)pooling;
    }
    ember_ebc_config ec = EMBER_EBC_CONFIG_DEFAULT;
    ec.tables = tables, ec.num_tables = ntables, ec.features = features, ec.num_features = ntables;
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = (int32_t)world;
    pc.batch_size = (int32_t)(batch / world > 0 ? batch / world : 1);
    pc.memory_per_rank = (size_t)memory;
    pc.pooling_factor = pf;
    pc.ranks_per_host = (int32_t)a.ranks_per_host;
    pc.intra_host_bw = a.intra_gbps * 1e9 / 8;
    pc.inter_host_bw = a.inter_gbps * 1e9 / 8;
    pc.mem_bw = a.mem_gbps * 1e9 / 8;
    pc.round_s = a.round_ms / 1e3;
    if (a.grid) pc.allow = 0x3f;
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(NULL, &ctx) != EMBER_OK) return 1;
    ember_table_plan plan[PLAN_MAX_TABLES];
    ember_plan_stats stats = {ember_ctx_alloc(ctx, sizeof(size_t) * (size_t)world),
                              ember_ctx_alloc(ctx, sizeof(double) * (size_t)world),
                              ember_ctx_alloc(ctx, sizeof(double) * (size_t)world),
                              ember_ctx_alloc(ctx, sizeof(double) * (size_t)world)};
    ember_status st = stats.storage_bytes && stats.step_bytes && stats.step_seconds && stats.inter_bytes
                          ? EMBER_OK
                          : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "out of memory for %lld ranks", (long long)world);
    int planned = 0;
    if (st == EMBER_OK && a.sharding == SHARDING_AUTO) {
        st = ember_plan_create(ctx, &ec, &pc, plan, &stats);
        planned = st == EMBER_OK;
    } else if (st == EMBER_OK) {
        int choice[PLAN_MAX_TABLES];
        for (int t = 0; t < ntables; t++) choice[t] = a.sharding;
        st = sharding_plan(ctx, ntables, (int32_t)dim, choice, (int32_t)world,
                           a.ranks_per_host > 0 ? (int32_t)a.ranks_per_host : (int32_t)world, plan);
        planned = st == EMBER_OK;
        if (st == EMBER_OK) st = ember_plan_predict(ctx, &ec, &pc, plan, &stats);
    }
    if (st == EMBER_OK && output) st = planfile_write(ctx, output, &ec, plan, (int32_t)world);
    const size_t need = st == EMBER_OK ? ember_plan_describe(&ec, plan, NULL, 0) + 1 : 0;
    char *text = need ? ember_ctx_alloc(ctx, need) : NULL;
    if (st == EMBER_OK && !text) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "out of memory for the description");
    if (st == EMBER_OK) {
        ember_plan_describe(&ec, plan, text, need);
        fputs(text, stdout);
        double slowest = 0;
        for (int q = 0; q < world; q++) {
            printf("rank %d: storage %.1f MiB, %.2f MB per step (%.2f MB to other hosts)", q,
                   (double)stats.storage_bytes[q] / (1 << 20), stats.step_bytes[q] / 1e6, stats.inter_bytes[q] / 1e6);
            if (pc.intra_host_bw > 0 || pc.inter_host_bw > 0) printf(", predicted %.3f ms", stats.step_seconds[q] * 1e3);
            printf("\n");
            if (stats.step_seconds[q] > slowest) slowest = stats.step_seconds[q];
        }
        if (pc.intra_host_bw > 0 || pc.inter_host_bw > 0)
            printf("predicted step time %.3f ms (embeddings only)\n", slowest * 1e3);
    } else {
        fprintf(stderr, "ember plan: %s\n", ember_ctx_errmsg(ctx));
    }
    ember_ctx_free(ctx, text);
    if (planned) ember_plan_release(ctx, plan, ntables);
    ember_ctx_free(ctx, stats.storage_bytes);
    ember_ctx_free(ctx, stats.step_bytes);
    ember_ctx_free(ctx, stats.step_seconds);
    ember_ctx_free(ctx, stats.inter_bytes);
    ember_ctx_destroy(ctx);
    return st == EMBER_OK ? 0 : 1;
}

// fuzz/fuzz_cli.c: the option parsing alone (no planning, no output): 0 run, 1 --help, 2 bad usage.
int cmd_plan_parse_only(int argc, char **argv) {
    plan_args a;
    char err[512];
    return parse(argc, argv, &a, err, sizeof err);
}
