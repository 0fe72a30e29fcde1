// `ember preprocess`: Criteo TSV day files into TorchRec's preprocessed day files (criteo_npy.h),
// as TorchRec's BinaryCriteoUtils.tsv_to_npys writes them, streaming. Local: no MPI.
//
// Day d of the output is the d-th input (from --first_day on): day_{d}_dense.npy float32 (N, 13) =
// log(x + 3) of the integer x in float32 (x read as int32, as numpy does; empty is 0; the log is
// C's logf, where numpy's float32 log may differ in the last place on rare values),
// day_{d}_sparse.npy int32 (N, 26) = the low 32 bits of the hexadecimal value (so hashes of 2^31
// and above read negative, as in TorchRec's int32 files), day_{d}_labels.npy int32 (N, 1). A line
// is read through one fixed buffer and written at once: memory does not grow with the file.
// Malformed lines (criteo.h's rules, and an integer beyond int32) are skipped and counted. Each
// file is written as FILE.partial and renamed over FILE when the day is complete, so a stopped run
// leaves no half-written day file where a good one stood, and a second run skips the days whose
// three files are already complete (resumable per day). Then, as TorchRec's Criteo 1TB pipeline
// continues: --frequency_threshold makes the categorical values contiguous (contig.h) and
// --shuffle_seed shuffles the training days jointly (shuffle.h), each recorded in DIR
// (contiguous.txt, shuffled.txt) so that a rerun does neither twice.
#define _GNU_SOURCE // getopt_long, getline

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "appctx.h"
#include "cli.h"
#include "commands.h"
#include "contig.h"
#include "criteo.h"
#include "criteo_npy.h"
#include "npy.h"
#include "shuffle.h"

static const char help[] =
    "usage: ember preprocess --input FILE[,FILE...] --output_dir DIR [--first_day N]\n"
    "\n"
    "Converts Criteo TSV day files (label, 13 integers, 26 hexadecimal categoricals per line) into\n"
    "TorchRec's preprocessed day files, as TorchRec's tsv_to_npys writes them: the d-th input becomes\n"
    "DIR/day_{d}_dense.npy (float32 log(x + 3)), day_{d}_sparse.npy (int32, the low 32 bits of each\n"
    "hexadecimal value) and day_{d}_labels.npy (int32), which 'ember train --dataset criteo_npy\n"
    "--data_dir DIR' reads. Streams each file in fixed memory; skips and counts malformed lines;\n"
    "writes each file as FILE.partial and renames it when its day is complete; days already complete\n"
    "in DIR are kept (a stopped run goes on where it stopped).\n"
    "\n"
    "  --input FILE[,FILE...]  the TSV days, in day order\n"
    "  --output_dir DIR        where the day files go (created if missing)\n"
    "  --first_day N           the number of the first input's day (default 0)\n"
    "  --frequency_threshold T then make each feature's values contiguous over all the days given, as\n"
    "                          TorchRec's sparse_to_contiguous: a value seen fewer than T times\n"
    "                          becomes 1, the others 2, 3, ... in order of first occurrence (T = 1:\n"
    "                          every value its own id); the days are remapped together, once\n"
    "  --shuffle_seed S        then shuffle the rows of every day given but the last (the eval day)\n"
    "                          jointly, as TorchRec's shuffle, through bucket files on DIR's disk\n"
    "  --memory_mb M           at most this for the remap's tables and the shuffle's buckets (default\n"
    "                          4096): features are remapped in groups that fit, two passes per group\n"
    "  -h, --help              this text\n";

typedef struct prep_opts {
    char *inputs; // the --input list, owned
    const char *dir;
    int first_day;
    int64_t threshold; // --frequency_threshold (0: none)
    int64_t memory_mb; // --memory_mb (0: not given)
    bool shuffle;      // --shuffle_seed given
    uint64_t seed;
} prep_opts;

static int parse(int argc, char **argv, prep_opts *o, char *err, size_t cap) {
    static const struct option lo[] = {{"input", required_argument, NULL, 'i'},
                                       {"output_dir", required_argument, NULL, 'o'},
                                       {"first_day", required_argument, NULL, 'f'},
                                       {"frequency_threshold", required_argument, NULL, 't'},
                                       {"memory_mb", required_argument, NULL, 'm'},
                                       {"shuffle_seed", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (c == 'h') return 1;
        if (c == 'i') {
            free(o->inputs);
            o->inputs = strdup(optarg);
        } else if (c == 'o') {
            o->dir = optarg;
        } else if (c == 'f') {
            char *end;
            const long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 1000000) {
                snprintf(err, cap, "ember preprocess: --first_day '%s': expected a day number >= 0", optarg);
                return 2;
            }
            o->first_day = (int)v;
        } else if (c == 's') {
            char *end;
            errno = 0;
            const unsigned long long v = strtoull(optarg, &end, 10);
            if (*end || end == optarg || optarg[0] == '-' || errno) {
                snprintf(err, cap, "ember preprocess: --shuffle_seed '%s': expected a number >= 0", optarg);
                return 2;
            }
            o->shuffle = true;
            o->seed = v;
        } else if (c == 't' || c == 'm') {
            char *end;
            const long long v = strtoll(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > (c == 't' ? (1LL << 32) : (1LL << 30))) {
                snprintf(err, cap, "ember preprocess: --%s '%s': expected %s",
                         c == 't' ? "frequency_threshold" : "memory_mb", optarg,
                         c == 't' ? "a count >= 1" : "megabytes >= 1");
                return 2;
            }
            if (c == 't') o->threshold = v;
            else o->memory_mb = v;
        } else {
            snprintf(err, cap, "ember preprocess: unknown option or missing value '%s' (try 'ember preprocess --help')",
                     argv[optind - 1]);
            return 2;
        }
    }
    if (o->memory_mb && !o->threshold && !o->shuffle) {
        snprintf(err, cap, "ember preprocess: --memory_mb bounds the remap of --frequency_threshold and the buckets "
                 "of --shuffle_seed, neither given (the conversion itself streams in fixed memory)");
        return 2;
    }
    if (!o->memory_mb) o->memory_mb = 4096;
    if (optind != argc || !o->inputs || !o->inputs[0] || !o->dir) {
        snprintf(err, cap, "ember preprocess: %s (try 'ember preprocess --help')",
                 optind != argc ? "unexpected arguments" : !o->dir ? "--output_dir DIR is missing" : "--input FILE is missing");
        return 2;
    }
    return 0;
}

int cmd_preprocess_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ember preprocess: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}


// Whether DIR/day_{d}_*.npy are three complete files of one day (a header that opens, N equal);
// `sparse`: the name of the sparse one ("sparse" or CONTIG_RAW).
static int64_t complete_day(const char *dir, int day, const char *sparse) {
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(&cc, &ctx) != EMBER_OK) return -1;
    int64_t n = -1;
    for (int k = 0; k < CRITEO_NPY_FILES; k++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/day_%d_%s.npy", dir, day, k == CRITEO_NPY_SPARSE ? sparse : criteo_npy_file[k]);
        if (access(p, F_OK) != 0) {
            n = -1;
            break;
        }
        npy_array a;
        if (npy_open(ctx, p, &a) != EMBER_OK) {
            n = -1;
            break;
        }
        const int64_t rows = a.shape[0];
        npy_close(&a);
        if (k > 0 && rows != n) {
            n = -1;
            break;
        }
        n = rows;
    }
    ember_ctx_destroy(ctx);
    return n;
}

// Converts one TSV into day `day` (its sparse file named `sparse_name`); 0 or 1 (the message
// printed). Prints the day's line.
static int convert(const char *in, const char *dir, int day, const char *sparse_name) {
    FILE *src = fopen(in, "r");
    if (!src) return cmd_preprocess_fail("'%s': cannot open: %s", in, strerror(errno));
    criteo_npy_writer w;
    if (criteo_npy_writer_open(&w, dir, day, sparse_name) != 0) {
        cmd_preprocess_fail("%s", w.error);
        criteo_npy_writer_abort(&w);
        fclose(src);
        return 1;
    }
    const double t0 = app_now_s();
    // Progress on stderr: a line redrawn every second on a terminal, else a line every 30 s.
    struct stat sst;
    const double total_mb = fstat(fileno(src), &sst) == 0 ? (double)sst.st_size / 1e6 : 0.0;
    const int tty = isatty(STDERR_FILENO);
    double last = 0.0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0, malformed = 0, first_bad = 0, bytes = 0;
    char why[200], first_why[200] = "";
    int io = 0;
    while (!io && (len = getline(&line, &cap, src)) >= 0) {
        lineno++;
        bytes += len;
        if ((lineno & 0xffff) == 0) {
            const double s = app_now_s() - t0;
            if (s - last >= (tty ? 1.0 : 30.0)) {
                last = s;
                fprintf(stderr, "%sday %d: %.0f of %.0f MB (%.0f%%), %.0f MB/s%s", tty ? "\r" : "", day,
                        (double)bytes / 1e6, total_mb, total_mb > 0 ? 100.0 * (double)bytes / 1e6 / total_mb : 0.0,
                        (double)bytes / 1e6 / s, tty ? "\033[K" : "\n");
            }
        }
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (len > 0 && line[len - 1] == '\r') line[--len] = 0;
        criteo_fields x;
        int ok = len <= CRITEO_LINE_MAX && memchr(line, 0, (size_t)len) == NULL;
        if (!ok && len > CRITEO_LINE_MAX) snprintf(why, sizeof why, "longer than %d bytes", CRITEO_LINE_MAX);
        else if (!ok) snprintf(why, sizeof why, "a NUL byte");
        if (ok) ok = criteo_parse_fields(line, &x, why, sizeof why);
        for (int j = 0; ok && j < DLRM_NUM_DENSE; j++) {
            if (x.ints[j] < INT32_MIN || x.ints[j] > INT32_MAX) {
                snprintf(why, sizeof why, "field %d: %lld is beyond int32", 2 + j, (long long)x.ints[j]);
                ok = 0;
            }
        }
        if (!ok) {
            if (!malformed++) {
                first_bad = lineno;
                snprintf(first_why, sizeof first_why, "%s", why);
            }
            continue;
        }
        float dense[DLRM_NUM_DENSE];
        int32_t sparse[DLRM_NUM_SPARSE];
        // numpy: int32 + 3 (wrapping), converted to float32, then float32's log.
        for (int j = 0; j < DLRM_NUM_DENSE; j++)
            dense[j] = logf((float)(int32_t)(uint32_t)((uint32_t)(int32_t)x.ints[j] + 3u));
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
            const uint32_t low = (uint32_t)x.hashes[f];
            memcpy(&sparse[f], &low, 4);
        }
        io = criteo_npy_writer_row(&w, dense, sparse, x.label) != 0;
    }
    free(line);
    const int read_error = ferror(src);
    fclose(src);
    if (tty && last > 0.0) fprintf(stderr, "\r\033[K");
    if (read_error || io || criteo_npy_writer_close(&w) != 0 || criteo_npy_writer_commit(&w) != 0) {
        if (read_error) cmd_preprocess_fail("'%s': cannot read: %s (no day file was replaced)", in, strerror(errno));
        else cmd_preprocess_fail("day %d from '%s': %s (no day file was replaced)", day, in, w.error);
        criteo_npy_writer_abort(&w);
        return 1;
    }
    const double s = app_now_s() - t0;
    printf("day %d: %lld rows from '%s' (%.1f MB in %.2f s, %.0f MB/s)", day, (long long)w.rows, in,
           (double)bytes / 1e6, s, s > 0 ? (double)bytes / 1e6 / s : 0.0);
    if (malformed) printf("; %lld malformed lines skipped, the first at line %lld: %s", (long long)malformed,
                          (long long)first_bad, first_why);
    printf("\n");
    fflush(stdout);
    return 0;
}

// DIR/contiguous.txt and DIR/shuffled.txt: what the last remap and shuffle did ("KEY V first_day A
// days N"), so that a later run knows the day files hold contiguous ids or shuffled rows and does
// not do it twice. Returns 1 when the file is there (*v = -1 when it does not read).
static int read_state(const char *dir, const char *file, const char *key, long long *v, int *first, int *days) {
    char p[1024], name[64];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    const int n = fscanf(f, "%63s %lld first_day %d days %d", name, v, first, days);
    fclose(f);
    if (n != 4 || strcmp(name, key) != 0) *v = -1;
    return 1;
}

static int write_state(const char *dir, const char *file, const char *key, long long v, int first, int days) {
    char p[1024], q[1100];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    snprintf(q, sizeof q, "%s.partial", p);
    FILE *f = fopen(q, "w");
    int bad = !f || fprintf(f, "%s %lld first_day %d days %d\n", key, v, first, days) < 0 || fflush(f) != 0 ||
              fsync(fileno(f)) != 0;
    if (f) bad = fclose(f) != 0 || bad;
    if (bad || rename(q, p) != 0) {
        cmd_preprocess_fail("'%s': cannot write: %s", p, strerror(errno));
        unlink(q);
        return 1;
    }
    return 0;
}

static int run(prep_opts *o) {
    if (mkdir(o->dir, 0777) != 0 && errno != EEXIST)
        return cmd_preprocess_fail("--output_dir '%s': cannot create: %s", o->dir, strerror(errno));
    int ndays = 1;
    for (const char *c = o->inputs; *c; c++) ndays += *c == ',';
    long long st = 0;
    int st_first = 0, st_days = 0;
    const int remapped = read_state(o->dir, "contiguous.txt", "frequency_threshold", &st, &st_first, &st_days);
    if (remapped && (!o->threshold || st != o->threshold || st_first != o->first_day || st_days != ndays)) {
        return cmd_preprocess_fail("--output_dir '%s' holds contiguous ids of days %d..%d (its contiguous.txt: "
                                   "--frequency_threshold %lld), not this run's %s: use another --output_dir",
                                   o->dir, st_first, st_first + st_days - 1, st,
                                   o->threshold ? "days and threshold" : "hashes");
    }
    long long sh = 0;
    int sh_first = 0, sh_days = 0;
    const int shuffled = read_state(o->dir, "shuffled.txt", "shuffle_seed", &sh, &sh_first, &sh_days);
    if (shuffled && (!o->shuffle || (unsigned long long)sh != o->seed || sh_first != o->first_day ||
                     sh_days != ndays - 1)) {
        return cmd_preprocess_fail("--output_dir '%s' holds days %d..%d shuffled with --shuffle_seed %lld (its "
                                   "shuffled.txt), not this run's %s: use another --output_dir", o->dir, sh_first,
                                   sh_first + sh_days - 1, sh, o->shuffle ? "seed and days" : "unshuffled days");
    }
    if (o->shuffle && ndays < 2)
        return cmd_preprocess_fail("--shuffle_seed shuffles every day given but the last (the eval day): give at "
                                   "least 2 days");
    if (remapped && (!o->shuffle || shuffled)) {
        bool all = true;
        for (int d = 0; d < ndays; d++) all = all && complete_day(o->dir, o->first_day + d, "sparse") >= 0;
        if (all) {
            printf("days %d..%d: complete in '%s' with contiguous ids (--frequency_threshold %lld)%s: kept\n",
                   o->first_day, o->first_day + ndays - 1, o->dir, st, shuffled ? ", shuffled" : "");
            return 0;
        }
    }
    // Before a remap the conversion's hashes go to the raw files; after one the days are final.
    const bool to_remap = o->threshold && !remapped;
    const char *sparse = to_remap ? CONTIG_RAW : "sparse";
    int day = o->first_day;
    for (char *save = NULL, *in = strtok_r(o->inputs, ",", &save); in; in = strtok_r(NULL, ",", &save), day++) {
        int64_t done = complete_day(o->dir, day, sparse);
        if (done < 0 && to_remap && complete_day(o->dir, day, "sparse") >= 0) {
            // Hashes an earlier run without --frequency_threshold left: the remap's input.
            char a[1024], b[1024];
            snprintf(a, sizeof a, "%s/day_%d_sparse.npy", o->dir, day);
            snprintf(b, sizeof b, "%s/day_%d_%s.npy", o->dir, day, CONTIG_RAW);
            if (rename(a, b) == 0) done = complete_day(o->dir, day, sparse);
        }
        if (done >= 0) {
            printf("day %d: complete in '%s' (%lld rows): kept\n", day, o->dir, (long long)done);
            continue;
        }
        if (convert(in, o->dir, day, sparse) != 0) return 1;
    }
    if (to_remap) {
        if (contig_remap(o->dir, o->first_day, ndays, o->threshold, o->memory_mb, stdout) != 0 ||
            write_state(o->dir, "contiguous.txt", "frequency_threshold", o->threshold, o->first_day, ndays) != 0)
            return 1;
    }
    if (!o->shuffle) return 0;
    if (shuffled) {
        printf("days %d..%d: shuffled in '%s' (--shuffle_seed %llu): kept\n", o->first_day, o->first_day + ndays - 2,
               o->dir, (unsigned long long)o->seed);
        return 0;
    }
    if (shuffle_days(o->dir, o->first_day, ndays - 1, o->seed, o->memory_mb, stdout) != 0) return 1;
    return write_state(o->dir, "shuffled.txt", "shuffle_seed", (long long)o->seed, o->first_day, ndays - 1);
}

int cmd_preprocess(int argc, char **argv) {
    prep_opts o;
    char err[512];
    const int p = parse(argc, argv, &o, err, sizeof err);
    if (p == 1) fputs(help, stdout);
    if (p == 2) fprintf(stderr, "%s\n", err);
    const int rc = p == 0 ? run(&o) : p == 1 ? 0 : 2;
    free(o.inputs);
    return rc;
}

int cmd_preprocess_parse_only(int argc, char **argv) {
    prep_opts o;
    char err[512];
    const int p = parse(argc, argv, &o, err, sizeof err);
    free(o.inputs);
    return p;
}
