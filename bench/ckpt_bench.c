// `ember bench ckpt`: checkpoint save and load throughput (ckpt_bench.h).
#define _POSIX_C_SOURCE 200809L // mkdtemp, posix_fadvise
#include "ckpt_bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "ember.h"
#include "ember/rng.h"
#include "report.h"
#include "tbe_bench.h"

enum { SAMPLES = 64, PATH_CAP = 4096 };

typedef struct opts {
    int32_t T, D, rounds, delta_batch;
    int64_t E, delta_steps;
    ember_optim_kind optim;
    ember_dtype dtype;
    ember_shard_scheme scheme, reshard;
    int no_reshard, quick;
    double chunk_mb;
    const char *dir;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpiexec -n W ember bench ckpt [options]\n"
            "  --tables T         tables (default 4)\n"
            "  --rows N           rows per table (default 524288)\n"
            "  --dim D            columns (default 128); defaults: 1.01 GiB of fp32 weights + row-wise state\n"
            "  --optimizer NAME   rowwise_adagrad (default), adam, adagrad, partial_rowwise_adam, sgd, ...\n"
            "  --dtype DT         weight dtype fp32 (default), fp16, bf16\n"
            "  --scheme S         plan of the saved collection: rw (default), tw, cw, twrw, grid, dp\n"
            "  --reshard S        plan of a second collection loaded from the same files: cw (default,\n"
            "                     at least 2 column slices), tw, rw, twrw, grid, dp, or none\n"
            "  --chunk_mb C       record size in MiB (default 8, the library's; fractions allowed)\n"
            "  --dir DIR          where the benchmark makes its fresh folder, removed at the end (default /tmp)\n"
            "  --rounds K         rounds of save, load, cold load, resharding load (default 3)\n"
            "  --delta_steps S    then S training steps of Zipf(1.05) ids (rows scattered over the table),\n"
            "                     and a delta save against a full save of the same state (default 100, 0: none)\n"
            "  --delta_batch B    ids per table and rank in each of those steps (default 1024)\n"
            "  --quick            tiny sizes, 2 rounds, 4 KiB records (smoke test)\n"
            "One JSON line per case from rank 0: save (fsync'd: the disk), load (files in the page cache),\n"
            "load_cold (files evicted from the page cache first), load_<reshard> (into the other plan):\n"
            "seconds (median, min over rounds; slowest rank, between barriers), MB/s (10^6 bytes of the\n"
            "checkpoint per second) per rank and in all, the bytes each rank wrote or read and the bytes\n"
            "the disk served (/proc/self/io), and the residual of sampled rows and steps after each load;\n"
            "delta: the delta's bytes and seconds against the full save's, and the rows changed;\n"
            "reshard_<a>_to_<b>: ember_sebc_reshard of the running collection to the other plan and back\n"
            "(seconds, bytes moved between ranks, the rate against the memory-copy rate of all ranks).\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){4, 128, 3, 1024, 524288, 100, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_DTYPE_F32, EMBER_SHARD_ROW_WISE,
                EMBER_SHARD_COLUMN_WISE, 0, 0, 8.0, "/tmp"};
    static const struct option lo[] = {{"tables", 1, 0, 'T'}, {"rows", 1, 0, 'E'},     {"dim", 1, 0, 'D'},
                                       {"optimizer", 1, 0, 'o'}, {"dtype", 1, 0, 't'},  {"scheme", 1, 0, 's'},
                                       {"reshard", 1, 0, 'r'},  {"chunk_mb", 1, 0, 'c'}, {"dir", 1, 0, 'p'},
                                       {"rounds", 1, 0, 'k'},   {"quick", 0, 0, 'q'},    {"help", 0, 0, 'h'},
                                       {"delta_steps", 1, 0, 'S'}, {"delta_batch", 1, 0, 'B'}, {0, 0, 0, 0}};
    int c, bad = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'T': o->T = atoi(optarg); break;
        case 'E': o->E = atoll(optarg); break;
        case 'D': o->D = atoi(optarg); break;
        case 'o': bad |= ember_optim_parse(optarg, &o->optim) != EMBER_OK; break;
        case 't': bad |= ember_dtype_parse(optarg, &o->dtype) != 0; break;
        case 's': bad |= ember_shard_scheme_parse(optarg, &o->scheme) != 0; break;
        case 'r':
            o->no_reshard = strcmp(optarg, "none") == 0;
            bad |= !o->no_reshard && ember_shard_scheme_parse(optarg, &o->reshard) != 0;
            break;
        case 'c': o->chunk_mb = atof(optarg); break;
        case 'p': o->dir = optarg; break;
        case 'k': o->rounds = atoi(optarg); break;
        case 'q': o->quick = 1; break;
        case 'S': o->delta_steps = atoll(optarg); break;
        case 'B': o->delta_batch = atoi(optarg); break;
        case 'h': return 1;
        default: return 2;
        }
    }
    if (o->quick) {
        o->T = 2, o->E = 3000, o->D = 16, o->rounds = 2, o->delta_steps = 10, o->delta_batch = 16;
        o->chunk_mb = 4096.0 / (1 << 20);
    }
    if (bad || optind < argc || o->T < 1 || o->E < 1 || o->D < 1 || o->rounds < 1 || o->delta_steps < 0 ||
        o->delta_batch < 1 || !(o->chunk_mb * (1 << 20) >= 1))
        return 2;
    return 0;
}

// Table t's plan under `scheme` on W ranks (ranks: W + 4 entries of the caller's): the library's
// default placement (ember_table_plan_default; twrw in groups of 2), except that column-wise cuts
// at least 2 slices, so that even at W = 1 its pieces hold other columns than a row-wise save's
// records (the load patches them).
static ember_table_plan plan_of(ember_shard_scheme scheme, int t, int W, int32_t D, int32_t *ranks) {
    ember_table_plan p;
    ember_table_plan_default(scheme, t, D, W, 2, ranks, &p);
    if (scheme == EMBER_SHARD_COLUMN_WISE && p.num_shards < 2 && D >= 2) {
        p.num_shards = p.num_ranks = 2;
        p.ranks = ranks;
        ranks[0] = ranks[1] = t % W;
    }
    return p;
}

// The value of element (row, col) of a tensor (key: its table and tensor): a signed 8-bit
// integer times 2^-7 .. 2^-14, exact in fp32, fp16 and bf16, so that a loaded value equals the
// saved one exactly whatever the dtype.
static float value_at(uint64_t key, int64_t row, int32_t col) {
    static const float scale[8] = {0x1p-7f, 0x1p-8f, 0x1p-9f, 0x1p-10f, 0x1p-11f, 0x1p-12f, 0x1p-13f, 0x1p-14f};
    const uint64_t h = ember_mix64(key + ((uint64_t)row << 24) + (uint64_t)col);
    return (float)((int)(h & 255) - 128) * scale[(h >> 8) & 7];
}

static uint64_t tensor_key(int t, int k) { return ember_rng_key(20261123u, (uint64_t)t * EMBER_MAX_TENSORS + (uint64_t)k); }

// Columns of tensor ti that piece p holds: its slice of a [rows, dim] tensor, [0, 1) of a per-row one.
static void piece_cols(const ember_table_config *tc, const ember_tensor_info *ti, const ember_piece *p, int32_t *c0,
                       int32_t *c1) {
    *c0 = ti->cols == tc->dim ? p->col_begin : 0;
    *c1 = ti->cols == tc->dim ? p->col_end : ti->cols;
}

// What a pass over the pieces does to rows [r0, r1) of one piece's tensor (buf: (r1 - r0) x n fp32).
typedef enum pass { FILL, CLOBBER, CHECK } pass;

// FILL: every element this rank holds gets value_at; CLOBBER: the sampled rows get zeros and the
// steps 0; CHECK: *residual = the largest difference of the sampled rows from value_at and of the
// steps from step0 + t, max over ranks. Collective. Returns EMBER_OK or the failure (every rank).
static ember_status pass_over(ember_sebc *s, pass what, int64_t step0, double *residual) {
    const int32_t T = ember_sebc_num_tables(s);
    ember_status st = EMBER_OK;
    double worst = 0;
    float *buf = NULL;
    size_t cap = 0;
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++) {
            ember_piece p;
            st = ember_sebc_piece(s, t, i, &p);
            for (int32_t k = 0; k < nt && st == EMBER_OK; k++) {
                int32_t c0, c1;
                piece_cols(tc, &ti[k], &p, &c0, &c1);
                const size_t n = (size_t)(c1 - c0);
                const int64_t per = what == FILL ? ((int64_t)1 << 18) / (int64_t)n + 1 : 1; // about 1 MiB a write
                if ((size_t)per * n > cap) {
                    free(buf);
                    cap = (size_t)per * n;
                    if (!(buf = malloc(sizeof(float) * cap))) {
                        st = EMBER_ERR_NOMEM;
                        break;
                    }
                }
                const uint64_t key = tensor_key(t, k);
                if (what == FILL) {
                    for (int64_t r = p.row_begin; r < p.row_end && st == EMBER_OK; r += per) {
                        const int64_t e = r + per < p.row_end ? r + per : p.row_end;
                        for (int64_t row = r; row < e; row++)
                            for (int32_t c = c0; c < c1; c++) buf[(size_t)(row - r) * n + (size_t)(c - c0)] = value_at(key, row, c);
                        st = ember_sebc_piece_write(s, t, i, ti[k].name, r, e, EMBER_DTYPE_F32, buf);
                    }
                    continue;
                }
                const int64_t m = tc->rows < SAMPLES ? tc->rows : SAMPLES;
                for (int64_t j = 0; j < m && st == EMBER_OK; j++) {
                    const int64_t row = m < 2 ? 0 : j * (tc->rows - 1) / (m - 1); // first and last included
                    if (row < p.row_begin || row >= p.row_end) continue;
                    if (what == CLOBBER) {
                        memset(buf, 0, sizeof(float) * n);
                        st = ember_sebc_piece_write(s, t, i, ti[k].name, row, row + 1, EMBER_DTYPE_F32, buf);
                        continue;
                    }
                    st = ember_sebc_piece_read(s, t, i, ti[k].name, row, row + 1, EMBER_DTYPE_F32, buf);
                    for (int32_t c = c0; st == EMBER_OK && c < c1; c++) {
                        const double d = fabs((double)buf[c - c0] - (double)value_at(key, row, c));
                        worst = d > worst || isnan(d) ? d : worst;
                    }
                }
            }
        }
    }
    free(buf);
    int failed = st != EMBER_OK, any = 0; // local failures, agreed before the collectives below
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) return st != EMBER_OK ? st : EMBER_ERR_COMM;
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        int64_t step = 0;
        if (what == CLOBBER) st = ember_sebc_set_step(s, t, 0);
        if (what == FILL) st = ember_sebc_set_step(s, t, step0 + t);
        if (what == CHECK && (st = ember_sebc_step(s, t, &step)) == EMBER_OK) {
            const double d = fabs((double)(step - (step0 + t)));
            worst = d > worst ? d : worst;
        }
    }
    if (residual) MPI_Allreduce(&worst, residual, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return st;
}

// Sets every table's step counter to step0 + t (what the next save stores; a load must restore it).
static ember_status set_steps(ember_sebc *s, int64_t step0) {
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < ember_sebc_num_tables(s) && st == EMBER_OK; t++) st = ember_sebc_set_step(s, t, step0 + t);
    return st;
}

// This process's I/O counters (/proc/self/io): bytes passed to read/write calls (rchar, wchar)
// and bytes the storage layer served or took (read_bytes, write_bytes); -1 where unknown.
typedef struct io_counts {
    long long rchar, wchar, read_bytes, write_bytes;
} io_counts;

static io_counts io_now(void) {
    io_counts c = {-1, -1, -1, -1};
    FILE *f = fopen("/proc/self/io", "r");
    char key[64];
    long long v;
    while (f && fscanf(f, "%63[^:]: %lld ", key, &v) == 2) {
        if (!strcmp(key, "rchar")) c.rchar = v;
        if (!strcmp(key, "wchar")) c.wchar = v;
        if (!strcmp(key, "read_bytes")) c.read_bytes = v;
        if (!strcmp(key, "write_bytes")) c.write_bytes = v;
    }
    if (f) fclose(f);
    return c;
}

// Drops the files of directory `dir` from the page cache (clean pages: a save fsyncs its files).
static void evict(const char *dir) {
    DIR *d = opendir(dir);
    char path[PATH_CAP + 300];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    if (d) closedir(d);
}

// Removes directory `dir` and the files in it (a checkpoint directory has no subdirectories).
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    char path[PATH_CAP + 300];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

// One case's timings over the rounds.
typedef struct series {
    const char *name;
    ember_sebc *s;
    int save;
    double *sec;
    double io_rank, disk, residual; // sums over rounds: max over ranks of the bytes a rank read or
                                    // wrote, sum over ranks of the bytes the disk served; max residual
    int n, have_io;
} series;

// Times one save or load of case c between barriers (the slowest rank's time), with its I/O.
static ember_status timed(series *c, const char *dir, const ember_checkpoint_options *co) {
    MPI_Barrier(MPI_COMM_WORLD);
    const io_counts a = io_now();
    const double t0 = bench_now_ms();
    const ember_status st = c->save ? ember_checkpoint_save(c->s, dir, co) : ember_checkpoint_load(c->s, dir, co);
    MPI_Barrier(MPI_COMM_WORLD);
    double dt = (bench_now_ms() - t0) * 1e-3, slowest = 0;
    const io_counts b = io_now();
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double mine = (double)(c->save ? b.wchar - a.wchar : b.rchar - a.rchar), most = 0, disk = 0;
    double dmine = (double)(c->save ? b.write_bytes - a.write_bytes : b.read_bytes - a.read_bytes);
    int have = a.rchar >= 0 && a.read_bytes >= 0 && b.rchar >= 0 && b.read_bytes >= 0, all = 0;
    MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&dmine, &disk, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    c->sec[c->n++] = slowest;
    c->io_rank += most;
    c->disk += disk;
    c->have_io = all;
    return st;
}

// Begins case `name`'s JSON line with the collection it ran on (scheme: its plan).
static void json_case(bench_json *j, const opts *o, const char *name, const char *scheme, int W) {
    bench_json_begin(j, stdout, "ckpt");
    bench_json_str(j, "case", name);
    bench_json_str(j, "scheme", scheme);
    bench_json_int(j, "W", W);
    bench_json_int(j, "T", o->T);
    bench_json_int(j, "E", o->E);
    bench_json_int(j, "D", o->D);
    bench_json_str(j, "dtype", ember_dtype_name(o->dtype));
    bench_json_str(j, "optimizer", ember_optim_name(o->optim));
}

static void report(const series *c, const opts *o, const char *scheme, int W, double total, const char *dir,
                   ember_ctx *ctx) {
    double *v = malloc(sizeof(double) * (size_t)c->n);
    if (!v) return;
    memcpy(v, c->sec, sizeof(double) * (size_t)c->n);
    const double smin = bench_min(v, c->n), smed = bench_median(v, c->n);
    free(v);
    const double io_rank = c->io_rank / c->n, disk = c->disk / c->n;
    bench_json j;
    json_case(&j, o, c->name, scheme, W);
    bench_json_int(&j, "chunk_bytes", (long long)(o->chunk_mb * (1 << 20)));
    bench_json_int(&j, "rounds", c->n);
    bench_json_fixed(&j, "total_bytes", total, 0);
    bench_json_fixed(&j, "total_gib", total / (1 << 30), 3);
    bench_json_fixed(&j, "bytes_per_rank", total / W, 0);
    bench_json_fixed(&j, "s_med", smed, 3);
    bench_json_fixed(&j, "s_min", smin, 3);
    bench_json_fixed(&j, "mbps_per_rank", total / W / smed * 1e-6, 1);
    bench_json_fixed(&j, "mbps", total / smed * 1e-6, 1);
    bench_json_fixed(&j, "io_bytes_per_rank_max", c->have_io ? io_rank : NAN, 0);
    bench_json_fixed(&j, "io_mbps_per_rank", c->have_io ? io_rank / smed * 1e-6 : NAN, 1);
    bench_json_fixed(&j, "disk_bytes", c->have_io ? disk : NAN, 0);
    // A load reads every byte of the checkpoint at least once over all ranks.
    if (!c->save) bench_json_bool(&j, "from_page_cache", c->have_io && disk < 0.1 * total);
    bench_json_sig(&j, "residual", c->residual);
    bench_json_str(&j, "dir", dir);
    bench_json_host(&j, ctx);
    bench_json_end(&j);
}

// Creates the collection of T tables under `scheme` (names: the caller's, 2 T x 16 bytes).
static ember_status make(ember_comm *comm, const opts *o, ember_shard_scheme scheme, char (*names)[16], ember_sebc **out) {
    const int W = ember_comm_size(comm);
    ember_table_config *tc = calloc((size_t)o->T, sizeof *tc);
    ember_feature_config *fc = calloc((size_t)o->T, sizeof *fc);
    ember_table_plan *plan = calloc((size_t)o->T, sizeof *plan);
    int32_t *ranks = calloc((size_t)o->T * (size_t)(W + 4), sizeof *ranks);
    ember_status st = tc && fc && plan && ranks ? EMBER_OK : EMBER_ERR_NOMEM;
    for (int t = 0; t < o->T && st == EMBER_OK; t++) {
        ember_optim_config oc = EMBER_OPTIM_CONFIG_DEFAULT;
        oc.kind = o->optim;
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc[t].name = names[2 * t], tc[t].rows = o->E, tc[t].dim = o->D, tc[t].dtype = o->dtype, tc[t].optim = oc;
        tc[t].init.kind = EMBER_INIT_ZEROS;
        fc[t] = (ember_feature_config){.name = names[2 * t + 1], .table = t};
        plan[t] = plan_of(scheme, t, W, o->D, ranks + (size_t)t * (size_t)(W + 4));
    }
    ember_ebc_config cfg = {.tables = tc, .num_tables = o->T, .features = fc, .num_features = o->T,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 7};
    int ok = st == EMBER_OK, all = 0; // every rank gives up together
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    st = all ? ember_sebc_create(comm, &cfg, plan, EMBER_GRAD_MEAN, out) : EMBER_ERR_NOMEM;
    free(tc), free(fc), free(plan), free(ranks);
    return st;
}

// ---- The live reshard case ---------------------------------------------------------------------

// Bytes per second one rank copies with memcpy while every rank copies at once (best of 5 passes
// over 256 MiB), summed over the ranks: the machine's memory-copy rate.
static double memcpy_rate(void) {
    const size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n), memset(b, 2, n);
        for (int k = 0; k < 5; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = bench_now_ms();
            memcpy(b, a, n);
            const double r = (double)n / ((bench_now_ms() - t0) * 1e-3);
            best = r > best ? r : best;
            a[k] = b[n - 1 - (size_t)k]; // keep the copies
        }
    }
    free(a), free(b);
    double all = 0;
    MPI_Allreduce(&best, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

// ember_sebc_reshard of the running collection to the other plan and back, K rounds, each timed
// between barriers and checked (every sampled row and step as before): seconds, the bytes moved
// between ranks, and the rate (the collection's bytes per second) against the memory-copy rate.
static ember_status live_case(ember_comm *comm, const opts *o, ember_sebc *s, double total) {
    const int W = ember_comm_size(comm), R = ember_comm_rank(comm);
    ember_table_plan *plan[2] = {calloc((size_t)o->T, sizeof(ember_table_plan)), calloc((size_t)o->T, sizeof(ember_table_plan))};
    int32_t *ranks = calloc((size_t)o->T * 2 * (size_t)(W + 4), sizeof *ranks);
    double *sec[2] = {calloc((size_t)o->rounds, sizeof(double)), calloc((size_t)o->rounds, sizeof(double))};
    double moved[2] = {0, 0}, residual = 0;
    ember_status st = plan[0] && plan[1] && ranks && sec[0] && sec[1] ? EMBER_OK : EMBER_ERR_NOMEM;
    for (int t = 0; t < o->T && st == EMBER_OK; t++)
        for (int d = 0; d < 2; d++)
            plan[d][t] = plan_of(d ? o->scheme : o->reshard, t, W, o->D, ranks + ((size_t)t * 2 + (size_t)d) * (size_t)(W + 4));
    const double rate = memcpy_rate();
    for (int r = 0; r < o->rounds && st == EMBER_OK; r++)
        for (int d = 0; d < 2 && st == EMBER_OK; d++) {
            st = pass_over(s, FILL, 7000 + r, NULL);
            if (st == EMBER_OK) st = set_steps(s, 7000 + r);
            ember_reshard_stats rs = {0};
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = bench_now_ms();
            if (st == EMBER_OK) st = ember_sebc_reshard(s, plan[d], 0, &rs);
            MPI_Barrier(MPI_COMM_WORLD);
            double dt = (bench_now_ms() - t0) * 1e-3, b = (double)rs.bytes_sent;
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(MPI_IN_PLACE, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            sec[d][r] = dt, moved[d] = b;
            double res = 0;
            if (st == EMBER_OK) st = pass_over(s, CHECK, 7000 + r, &res);
            residual = res > residual || isnan(res) ? res : residual;
        }
    for (int d = 0; d < 2 && st == EMBER_OK && R == 0; d++) {
        const double smed = bench_median(sec[d], o->rounds);
        char name[48];
        snprintf(name, sizeof name, "reshard_%s_to_%s", ember_shard_scheme_short_name(d ? o->reshard : o->scheme),
                 ember_shard_scheme_short_name(d ? o->scheme : o->reshard));
        bench_json j;
        json_case(&j, o, name, ember_shard_scheme_short_name(d ? o->reshard : o->scheme), W);
        bench_json_int(&j, "rounds", o->rounds);
        bench_json_fixed(&j, "total_bytes", total, 0);
        bench_json_fixed(&j, "total_gib", total / (1 << 30), 3);
        bench_json_fixed(&j, "bytes_moved", moved[d], 0);
        bench_json_fixed(&j, "s_med", smed, 3);
        bench_json_fixed(&j, "s_min", bench_min(sec[d], o->rounds), 3);
        bench_json_fixed(&j, "mbps", total / smed * 1e-6, 1);
        bench_json_fixed(&j, "memcpy_mbps", rate * 1e-6, 1);
        bench_json_fixed(&j, "rate_vs_memcpy", total / smed / rate, 3);
        bench_json_sig(&j, "residual", residual);
        bench_json_host(&j, ember_comm_ctx(comm));
        bench_json_end(&j);
    }
    free(plan[0]), free(plan[1]), free(ranks), free(sec[0]), free(sec[1]);
    if (st == EMBER_OK && !(residual == 0)) st = EMBER_ERR_NUMERIC;
    return st;
}

// ---- The delta case ------------------------------------------------------------------------------

// The sampled rows of every tensor this rank holds (pass_over's rows, plus the 64 first), in a
// fixed order, appended to *v (n values, cap allocated). Local.
static ember_status sample(ember_sebc *s, float **v, size_t *n, size_t *cap) {
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < ember_sebc_num_tables(s) && st == EMBER_OK; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        const int64_t m = tc->rows < SAMPLES ? tc->rows : SAMPLES;
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++) {
            ember_piece p;
            st = ember_sebc_piece(s, t, i, &p);
            for (int32_t k = 0; k < nt && st == EMBER_OK; k++) {
                int32_t c0, c1;
                piece_cols(tc, &ti[k], &p, &c0, &c1);
                for (int64_t j = 0; j < 2 * m && st == EMBER_OK; j++) {
                    const int64_t row = j < m ? j : m < 2 ? 0 : (j - m) * (tc->rows - 1) / (m - 1);
                    if (row < p.row_begin || row >= p.row_end) continue;
                    if (*n + (size_t)(c1 - c0) > *cap) {
                        *cap = 2 * (*n + (size_t)(c1 - c0));
                        float *x = realloc(*v, sizeof(float) * *cap);
                        if (!x) return EMBER_ERR_NOMEM;
                        *v = x;
                    }
                    st = ember_sebc_piece_read(s, t, i, ti[k].name, row, row + 1, EMBER_DTYPE_F32, *v + *n);
                    *n += (size_t)(c1 - c0);
                }
            }
        }
    }
    return st;
}

// Rows changed since the mark, over every rank's pieces (a data-parallel table counted once).
static double changed_rows(ember_sebc *s) {
    double n = 0, all = 0;
    const int W = ember_comm_size(ember_sebc_comm(s)), R = ember_comm_rank(ember_sebc_comm(s));
    for (int32_t t = 0; t < ember_sebc_num_tables(s); t++)
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t); i++) {
            ember_piece p;
            if (ember_sebc_piece(s, t, i, &p) != EMBER_OK || p.col_begin != 0 || (p.replicated && t % W != R)) continue;
            for (int64_t r = p.row_begin, b, e; ember_sebc_piece_dirty(s, t, i, r, &b, &e) == EMBER_OK && b < p.row_end; r = e)
                n += (double)(e - b);
        }
    MPI_Allreduce(&n, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

// Bytes of the files of directory dir whose names start with `prefix` (rank 0; broadcast).
static double dir_bytes(const char *dir, const char *prefix) {
    double n = 0;
    int R = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    if (R == 0) {
        DIR *d = opendir(dir);
        char path[PATH_CAP + 300];
        struct stat sb;
        for (struct dirent *e; d && (e = readdir(d));) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (stat(path, &sb) == 0) n += (double)sb.st_size;
        }
        if (d) closedir(d);
    }
    MPI_Bcast(&n, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return n;
}

// The delta case: a full save into DIR-chain, delta_steps training steps of Zipf ids, then a delta
// save into DIR-chain and a full save of the same state into DIR-full (one of each); the residual
// is 1 when a sampled row differs, bitwise, after loading the chain back from what it was before.
static ember_status delta_case(ember_comm *comm, const opts *o, ember_sebc *s, const char *dir, double total) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int W = ember_comm_size(comm), R = ember_comm_rank(comm);
    char chain[PATH_CAP + 16], full[PATH_CAP + 16];
    snprintf(chain, sizeof chain, "%s-chain", dir);
    snprintf(full, sizeof full, "%s-full", dir);
    const ember_checkpoint_options co = {.chunk_bytes = (size_t)(o->chunk_mb * (1 << 20))};
    ember_checkpoint_options dco = co;
    dco.delta = 1;
    const tbe_bench_shape sh = {o->T, o->E, o->D, o->delta_batch, 1};
    double *cdf = tbe_bench_zipf_cdf(o->E);
    const int64_t n = (int64_t)o->T * o->delta_batch;
    int64_t *ranks = malloc(sizeof(int64_t) * (size_t)n);
    int32_t *lengths = malloc(sizeof(int32_t) * (size_t)n);
    const size_t nout = (size_t)o->delta_batch * (size_t)ember_sebc_output_dim(s);
    float *out = malloc(sizeof(float) * nout), *grad = malloc(sizeof(float) * nout), *before = NULL, *after = NULL;
    ember_status st = cdf && ranks && lengths && out && grad ? EMBER_OK : EMBER_ERR_NOMEM;
    int ok = st == EMBER_OK, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) st = EMBER_ERR_NOMEM;
    series fs = {"full", s, 1, NULL, 0, 0, 0, 0, 0}, ds = {"delta", s, 1, NULL, 0, 0, 0, 0, 0};
    double sec[2] = {0, 0};
    fs.sec = &sec[0], ds.sec = &sec[1];
    if (st == EMBER_OK) st = ember_checkpoint_save(s, chain, &co);
    // A multiplier coprime to E scatters the Zipf ranks over the table (hot rows are not adjacent).
    uint64_t mul = 1000003;
    while (o->E > 1 && (uint64_t)o->E % mul == 0) mul += 2;
    for (int64_t i = 0; i < n; i++) lengths[i] = 1;
    for (size_t i = 0; i < nout; i++) grad[i] = 1e-3f * (float)((i % 7) + 1);
    ember_sebc_set_training(s, 1);
    const double t0 = bench_now_ms();
    for (int64_t step = 0; step < o->delta_steps && st == EMBER_OK; step++) {
        tbe_bench_make_ids(&sh, 1, cdf, (uint64_t)(step * W + R) * 7919u + 17u, ranks);
        for (int64_t i = 0; i < n; i++) ranks[i] = (int64_t)(((uint64_t)ranks[i] * mul) % (uint64_t)o->E);
        const ember_kjt kjt = {.num_features = o->T, .batch_size = o->delta_batch, .lengths = lengths,
                               .values = ranks, .nnz = n};
        st = ember_sebc_forward(s, &kjt, out);
        if (st == EMBER_OK) st = ember_sebc_backward(s, &kjt, grad);
    }
    const double train_s = (bench_now_ms() - t0) * 1e-3, rows = st == EMBER_OK ? changed_rows(s) : 0;
    if (st == EMBER_OK) st = timed(&ds, chain, &dco);
    if (st == EMBER_OK) st = timed(&fs, full, &co);
    // The chain loads back as the state it saved (sampled rows, hot and spread).
    size_t nb = 0, na = 0, cb = 0, ca = 0;
    if (st == EMBER_OK) st = sample(s, &before, &nb, &cb);
    if (st == EMBER_OK) st = pass_over(s, CLOBBER, 0, NULL);
    if (st == EMBER_OK) st = ember_checkpoint_load(s, chain, &co);
    if (st == EMBER_OK) st = sample(s, &after, &na, &ca);
    double res = 0, worst = 0;
    for (size_t i = 0; st == EMBER_OK && i < nb; i++) {
        // Bitwise: the filled optimizer state may be negative, and row-wise Adagrad's updates of
        // it NaN; a load restores those bits too.
        const double d = na != nb || memcmp(&before[i], &after[i], sizeof(float)) ? 1 : 0;
        res = d > res ? d : res;
    }
    MPI_Allreduce(&res, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (st == EMBER_OK) {
        const double gen1 = dir_bytes(chain, "g1-"), gen2 = dir_bytes(chain, "g2-"), fullb = dir_bytes(full, "g");
        const double mchain = dir_bytes(chain, "manifest.json"), mfull = dir_bytes(full, "manifest.json");
        if (R == 0) {
            bench_json j;
            json_case(&j, o, "delta", ember_shard_scheme_short_name(o->scheme), W);
            bench_json_int(&j, "steps", o->delta_steps);
            bench_json_int(&j, "ids_per_step", (long long)n * W);
            bench_json_str(&j, "ids", "zipf 1.05, scattered");
            bench_json_fixed(&j, "train_s", train_s, 3);
            bench_json_fixed(&j, "rows_changed", rows, 0);
            bench_json_fixed(&j, "rows_changed_fraction", rows / ((double)o->T * (double)o->E), 4);
            bench_json_fixed(&j, "total_bytes", total, 0);
            bench_json_fixed(&j, "full_bytes", fullb + mfull, 0);
            bench_json_fixed(&j, "delta_bytes", gen2 + mchain, 0);
            bench_json_fixed(&j, "delta_manifest_bytes", mchain, 0);
            bench_json_fixed(&j, "delta_to_full_bytes", (gen2 + mchain) / (fullb + mfull), 4);
            bench_json_fixed(&j, "base_bytes_kept", gen1, 0);
            bench_json_fixed(&j, "full_s", sec[0], 3);
            bench_json_fixed(&j, "delta_s", sec[1], 3);
            bench_json_fixed(&j, "delta_to_full_s", sec[1] / sec[0], 4);
            bench_json_sig(&j, "residual", worst);
            bench_json_host(&j, ctx);
            bench_json_end(&j);
        }
        if (!(worst == 0)) st = ember_ctx_set_error(ctx, EMBER_ERR_NUMERIC, "the chain loaded back differs by %g", worst);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) {
        remove_dir(chain);
        remove_dir(full);
    }
    free(cdf), free(ranks), free(lengths), free(out), free(grad), free(before), free(after);
    return st;
}

static int run(ember_comm *comm, const opts *o) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int W = ember_comm_size(comm), R = ember_comm_rank(comm);
    char(*names)[16] = calloc((size_t)o->T * 2, 16);
    char dir[PATH_CAP] = "";
    int ok = names != NULL, rc = 1;
    if (R == 0) {
        snprintf(dir, sizeof dir, "%s/ember_ckpt_bench_XXXXXX", o->dir);
        if (!mkdtemp(dir)) {
            fprintf(stderr, "ember bench ckpt: cannot make a folder in '%s'\n", o->dir);
            ok = 0;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!ok) {
        free(names);
        return 1;
    }
    for (int t = 0; t < o->T; t++) {
        snprintf(names[2 * t], 16, "t%d", t);
        snprintf(names[2 * t + 1], 16, "f%d", t);
    }
    double total = 0; // the checkpoint's bytes: every table's weights and state, once
    for (int t = 0; t < o->T; t++) {
        ember_optim_config oc = EMBER_OPTIM_CONFIG_DEFAULT;
        oc.kind = o->optim;
        ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
        tc.name = names[2 * t], tc.rows = o->E, tc.dim = o->D, tc.dtype = o->dtype, tc.optim = oc;
        tc.init.kind = EMBER_INIT_ZEROS;
        size_t w = 0, s = 0;
        ember_table_config_bytes(&tc, &w, &s);
        total += (double)w + (double)s;
    }
    ember_sebc *s = NULL, *s2 = NULL;
    const ember_checkpoint_options co = {.chunk_bytes = (size_t)(o->chunk_mb * (1 << 20))};
    char reshard_case[32];
    snprintf(reshard_case, sizeof reshard_case, "load_%s", ember_shard_scheme_short_name(o->reshard));
    series cases[4] = {{"save", NULL, 1, NULL, 0, 0, 0, 0, 0},
                       {"load", NULL, 0, NULL, 0, 0, 0, 0, 0},
                       {"load_cold", NULL, 0, NULL, 0, 0, 0, 0, 0},
                       {reshard_case, NULL, 0, NULL, 0, 0, 0, 0, 0}};
    const int ncases = o->no_reshard ? 3 : 4;
    for (int c = 0; c < 4; c++) cases[c].sec = calloc((size_t)o->rounds, sizeof(double));
    const double t0 = bench_now_ms();
    ember_status st = make(comm, o, o->scheme, names, &s);
    if (st == EMBER_OK) st = pass_over(s, FILL, 1000, NULL);
    if (st == EMBER_OK && !o->no_reshard) st = make(comm, o, o->reshard, names, &s2);
    if (R == 0 && st == EMBER_OK)
        fprintf(stderr, "ember bench ckpt: W %d, %d tables of %lld x %d %s + %s state: %.3f GiB in %s (set-up %.1f s)\n", W,
                (int)o->T, (long long)o->E, (int)o->D, ember_dtype_name(o->dtype), ember_optim_name(o->optim),
                total / (1 << 30), dir, (bench_now_ms() - t0) * 1e-3);
    for (int c = 0; c < 4; c++) cases[c].s = c == 3 ? s2 : s;
    for (int r = 0; r < o->rounds && st == EMBER_OK; r++) {
        const int64_t step0 = 1000 * (r + 1);
        for (int c = 0; c < ncases && st == EMBER_OK; c++) {
            series *x = &cases[c];
            // A save stores this round's steps; a load must bring back every sampled row and step.
            st = x->save ? set_steps(x->s, step0) : pass_over(x->s, CLOBBER, 0, NULL);
            if (c == 2) {
                evict(dir);
                MPI_Barrier(MPI_COMM_WORLD);
            }
            if (st == EMBER_OK) st = timed(x, dir, &co);
            double res = 0;
            if (st == EMBER_OK && !x->save) st = pass_over(x->s, CHECK, step0, &res);
            x->residual = res > x->residual || isnan(res) ? res : x->residual;
        }
        if (R == 0 && st == EMBER_OK) {
            fprintf(stderr, "ember bench ckpt: round %d:", r + 1);
            for (int c = 0; c < ncases; c++) fprintf(stderr, " %s %.2f s", cases[c].name, cases[c].sec[r]);
            fprintf(stderr, "\n");
        }
    }
    if (st == EMBER_OK) {
        for (int c = 0; c < ncases; c++)
            if (R == 0) report(&cases[c], o, ember_shard_scheme_short_name(c == 3 ? o->reshard : o->scheme), W, total, dir, ctx);
    }
    if (st == EMBER_OK && o->delta_steps > 0) st = delta_case(comm, o, s, dir, total);
    if (st == EMBER_OK && !o->no_reshard) {
        ember_sebc_destroy(s2); // the live reshard needs room for both placements of s
        s2 = NULL;
        st = live_case(comm, o, s, total);
    }
    if (st != EMBER_OK) {
        if (R == 0) fprintf(stderr, "ember bench ckpt: %s\n", ember_ctx_errmsg(ctx));
    } else {
        rc = 0;
        for (int c = 0; c < ncases; c++) rc |= !(cases[c].residual == 0);
    }
    ember_sebc_destroy(s);
    ember_sebc_destroy(s2);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) remove_dir(dir);
    for (int c = 0; c < 4; c++) free(cases[c].sec);
    free(names);
    return rc;
}

static int run_opts(ember_comm *comm, const void *o) { return run(comm, o); }

int ckpt_bench_main(int argc, char **argv) {
    opts o;
    const int p = parse(argc, argv, &o);
    return bench_mpi_main(p, usage, run_opts, &o);
}

int ckpt_bench_parse_only(int argc, char **argv) {
    opts o;
    return parse(argc, argv, &o);
}
