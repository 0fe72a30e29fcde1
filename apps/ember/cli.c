// Helpers shared by the subcommands.
#define _GNU_SOURCE // getopt_long
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "cli.h"
#include "ember/ebc.h"
#include "train.h"

// What the launchers put in each process's environment (checked with Open MPI 4.1 and 5.0, and
// the Hydra of MPICH 4.0 and 5.0): Open MPI's mpiexec sets OMPI_COMM_WORLD_RANK and _SIZE (5.0's
// prterun as well as 4.1's orterun) and PMIX_RANK, as other PMIx launchers do; Hydra, which Intel
// MPI also uses, sets PMI_RANK and PMI_SIZE.
static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};

static const char *first_set(const char *const *vars, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return v;
    }
    return NULL;
}

int cli_launcher_rank(void) {
    const char *v = first_set(rank_vars, sizeof rank_vars / sizeof rank_vars[0]);
    return v ? atoi(v) : 0;
}

// More than one rank, or a launcher that does not say how many (PMIx alone).
static bool launched_with_peers(void) {
    if (!first_set(rank_vars, sizeof rank_vars / sizeof rank_vars[0])) return false;
    const char *size = first_set(size_vars, sizeof size_vars / sizeof size_vars[0]);
    return !size || atoi(size) != 1;
}

int cli_exit(int status) {
    fflush(stdout);
    fflush(stderr);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) return status;
    if (!initialized) {
        // A path that never initialised MPI read only the command line, the same on every rank,
        // so every rank of the launch is here too; it joins MPI just to meet the others.
        if (!launched_with_peers()) return status;
        MPI_Init(NULL, NULL);
    }
    // Every rank's lines are written (flushed above) before any rank can exit: a launcher that
    // ends the job at the first non-zero exit (Open MPI 5's prterun) finds nothing unsaid.
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return status;
}

bool cli_parse_i64(const char *flag, const char *text, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t cap) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno == ERANGE) {
        snprintf(err, cap, "%s '%s': not an integer", flag, text);
        return false;
    }
    if (v < min || v > max) {
        snprintf(err, cap, "%s %lld: expected %lld..%lld", flag, v, (long long)min, (long long)max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_double(const char *flag, const char *text, double *out, char *err, size_t cap) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        snprintf(err, cap, "%s '%s': not a finite number", flag, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_i64_list(const char *flag, const char *text, int64_t min, int64_t max, int64_t *items, int cap_items,
                        int *n, char *err, size_t cap) {
    char item[64];
    *n = 0;
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (*n == cap_items) {
            snprintf(err, cap, "%s '%s': more than %d values", flag, text, cap_items);
            return false;
        }
        if (len == 0 || len >= sizeof item) {
            snprintf(err, cap, "%s '%s': expected comma-separated integers", flag, text);
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_parse_i64(flag, item, min, max, &items[(*n)++], err, cap)) return false;
        if (!comma) return true;
        p = comma + 1;
    }
}

void cli_optim_names(const char *sep, char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (int k = 0; k < EMBER_OPT_COUNT && n < cap; k++) {
        int len = snprintf(buf + n, cap - n, "%s%s", k ? sep : "", ember_optim_name((ember_optim_kind)k));
        if (len < 0) break;
        n += (size_t)len;
    }
}

bool cli_parse_timeout(const char *text, double *out, char *err, size_t cap) {
    if (!cli_parse_double("--timeout_s", text, out, err, cap)) return false;
    if (*out >= 0 && *out <= 1e9) return true;
    snprintf(err, cap, "--timeout_s '%s': expected seconds in [0, 1e9] (0: no deadline)", text);
    return false;
}

bool cli_call_timeout(void *base, void *field, const char *flag, const char *text, char *err, size_t cap) {
    (void)base, (void)flag;
    return cli_parse_timeout(text, field, err, cap);
}

const char *cli_name_grad_convention(int v) {
    return v >= 0 && v < EMBER_GRAD_COUNT ? ember_grad_convention_name((ember_grad_convention)v) : NULL;
}
const char *cli_name_dataset(int v) {
    return v >= 0 && v < TRAIN_DATASET_COUNT ? train_dataset_name((train_dataset)v) : NULL;
}
const char *cli_name_eval_split(int v) { return v == 0 ? "val" : v == 1 ? "test" : NULL; }
const char *cli_name_malformed(int v) {
    return v >= 0 && v < CRITEO_MALFORMED_COUNT ? criteo_malformed_name((criteo_malformed_mode)v) : NULL;
}
const char *cli_name_dense_optimizer(int v) {
    return v >= 0 && v < DENSE_OPT_COUNT ? dense_optim_name((dense_optim_kind)v) : NULL;
}
const char *cli_name_embedding_optimizer(int v) {
    return v >= 0 && v < EMBER_OPT_COUNT ? ember_optim_name((ember_optim_kind)v) : NULL;
}
const char *cli_name_evict_policy(int v) {
    return v >= 0 && v < EMBER_EVICT_COUNT ? ember_evict_policy_name((ember_evict_policy)v) : NULL;
}
const char *cli_name_interaction(int v) { return v == 0 ? "dot" : v == 1 ? "dcn" : NULL; }
const char *cli_name_hash(int v) { return v == 0 ? "modulo" : v == 1 ? "collisionless" : NULL; }

int cli_name_value(const char *(*names)(int v), const char *name) {
    for (int v = 0; name && names(v); v++) {
        if (strcmp(names(v), name) == 0) return v;
    }
    return -1;
}

// getopt_long's value of row i (above every short option's character).
#define FIRST_VALUE 256

// An integer of `size` bytes at p: a bool, an int32_t or an int or enum, an int64_t.
static bool store_int(void *p, size_t size, int64_t v) {
    if (size == sizeof(bool)) {
        *(bool *)p = v != 0;
    } else if (size == sizeof(int32_t)) {
        const int32_t x = (int32_t)v;
        memcpy(p, &x, sizeof x);
    } else if (size == sizeof(int64_t)) {
        memcpy(p, &v, sizeof v);
    } else {
        return false;
    }
    return true;
}

// Row f's value `text` (NULL for CLI_SET) into base.
static bool read_value(const cli_flag *f, const char *flag, const char *text, void *base, char *err, size_t cap) {
    char *field = (char *)base + f->at;
    int64_t v = 0;
    double x = 0.0;
    switch (f->arg) {
    case CLI_INT:
        if (!cli_parse_i64(flag, text, f->min, f->max, &v, err, cap)) return false;
        break;
    case CLI_REAL:
        if (!cli_parse_double(flag, text, &x, err, cap)) return false;
        if (f->size == sizeof(float)) {
            const float y = (float)x;
            memcpy(field, &y, sizeof y);
        } else {
            memcpy(field, &x, sizeof x);
        }
        return true;
    case CLI_TEXT: memcpy(field, &text, sizeof text); return true;
    case CLI_NAME: {
        for (v = 0; f->names((int)v) && strcmp(text, f->names((int)v)) != 0; v++) continue;
        if (f->names((int)v)) break;
        char names[512];
        size_t n = 0;
        names[0] = '\0';
        for (int k = 0; f->names(k) && n < sizeof names; k++) {
            const int len = snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "", f->names(k));
            if (len < 0) break;
            n += (size_t)len;
        }
        snprintf(err, cap, "%s '%s': expected one of %s", flag, text, names);
        return false;
    }
    case CLI_SET:
        if (f->call) return f->call(base, field, flag, NULL, err, cap);
        v = 1;
        break;
    case CLI_CALL: return f->call(base, field, flag, text, err, cap);
    }
    if (store_int(field, f->size, v)) return true;
    snprintf(err, cap, "%s: internal error: a field of %zu bytes", flag, f->size);
    return false;
}

int cli_parse_flags(int argc, char **argv, const cli_flag *flags, int n, void *base, int *order, char *err,
                    size_t cap) {
    struct option lo[CLI_MAX_FLAGS + 2];
    if (n > CLI_MAX_FLAGS) {
        snprintf(err, cap, "internal error: %d options, at most %d", n, CLI_MAX_FLAGS);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        lo[i] = (struct option){flags[i].name, flags[i].arg == CLI_SET ? no_argument : required_argument, NULL,
                                FIRST_VALUE + i};
        if (order) order[i] = 0;
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    int c, given = 0;
    char flag[64];
    opterr = 0; // messages are ours, printed once
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == 'h') return 1;
        if (c >= FIRST_VALUE && c < FIRST_VALUE + n) {
            const int i = c - FIRST_VALUE;
            snprintf(flag, sizeof flag, "--%s", flags[i].name);
            if (!read_value(&flags[i], flag, optarg, base, err, cap)) return 2;
            if (order && !order[i]) order[i] = ++given;
            continue;
        }
        // The option as the user wrote it.
        if (optopt > 0 && optopt < FIRST_VALUE) snprintf(flag, sizeof flag, "-%c", optopt);
        else snprintf(flag, sizeof flag, "%s", argv[optind - 1]);
        if (c == ':') snprintf(err, cap, "%s needs a value", flag);
        else snprintf(err, cap, "unknown option '%s'", flag);
        return 2;
    }
    if (optind < argc) {
        snprintf(err, cap, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    return 0;
}
