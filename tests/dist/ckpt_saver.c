// The process the checkpoint kill loop (ckpt_kill.sh) kills: a row-wise sharded table whose
// every weight and optimizer-state value equals the save's number, saved again and again into one
// checkpoint directory; and the check that whatever is there loads whole and consistent.
//   ckpt_saver save PATH FIRST   saves with numbers FIRST, FIRST + 1, ... until killed; each
//                                rank first writes its pid to PATH.pid.<rank>
//   ckpt_saver verify PATH       loads PATH (any world size) and checks that every value equals
//                                the step counter it was saved with; prints "ok <number>"
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember.h"

enum { ROWS = 300000, DIM = 16 };

static ember_sebc *open_table(ember_comm *comm) {
    ember_optim_config oc = EMBER_OPTIM_CONFIG_DEFAULT;
    oc.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "kill", t.rows = ROWS, t.dim = DIM, t.init = (ember_init){.kind = EMBER_INIT_ZEROS}, t.optim = oc;
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = {.tables = &t, .num_tables = 1, .features = &f, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 1};
    ember_table_plan plan = {.scheme = EMBER_SHARD_ROW_WISE};
    ember_sebc *s = NULL;
    return ember_sebc_create(comm, &cfg, &plan, EMBER_GRAD_MEAN, &s) == EMBER_OK ? s : NULL;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rc = 2;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    ember_sebc *s = NULL;
    float *w = malloc(sizeof(float) * (size_t)ROWS * DIM), *m = malloc(sizeof(float) * ROWS);
    if (argc < 3 || !w || !m || ember_ctx_create(NULL, &ctx) != EMBER_OK ||
        ember_comm_create(ctx, MPI_COMM_WORLD, &comm) != EMBER_OK || !(s = open_table(comm))) {
        fprintf(stderr, "ckpt_saver: usage: ckpt_saver save PATH FIRST | verify PATH (or set-up failed)\n");
        goto done;
    }
    const int rank = ember_comm_rank(comm);
    if (strcmp(argv[1], "save") == 0 && argc > 3) {
        char pidfile[512];
        snprintf(pidfile, sizeof pidfile, "%s.pid.%d", argv[2], rank);
        FILE *pf = fopen(pidfile, "w");
        if (pf) {
            fprintf(pf, "%ld\n", (long)getpid());
            fclose(pf);
        }
        for (long k = atol(argv[3]);; k++) {
            for (size_t i = 0; i < (size_t)ROWS * DIM; i++) w[i] = (float)k;
            for (size_t i = 0; i < ROWS; i++) m[i] = (float)k;
            if (ember_sebc_write(s, 0, "weight", w, -1) != EMBER_OK ||
                ember_sebc_write(s, 0, "momentum1", m, -1) != EMBER_OK || ember_sebc_set_step(s, 0, k) != EMBER_OK ||
                ember_checkpoint_save(s, argv[2], NULL) != EMBER_OK) {
                fprintf(stderr, "ckpt_saver: save %ld: %s\n", k, ember_ctx_errmsg(ctx));
                goto done;
            }
            if (rank == 0) {
                printf("saved %ld\n", k);
                fflush(stdout);
            }
        }
    } else if (strcmp(argv[1], "verify") == 0) {
        int64_t step = -1;
        if (ember_checkpoint_load(s, argv[2], NULL) != EMBER_OK || ember_sebc_step(s, 0, &step) != EMBER_OK ||
            ember_sebc_read(s, 0, "weight", w, -1) != EMBER_OK || ember_sebc_read(s, 0, "momentum1", m, -1) != EMBER_OK) {
            fprintf(stderr, "ckpt_saver: verify '%s': %s\n", argv[2], ember_ctx_errmsg(ctx));
            rc = 1;
            goto done;
        }
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)ROWS * DIM; i++) bad += w[i] != (float)step;
        for (size_t i = 0; i < ROWS; i++) bad += m[i] != (float)step;
        if (bad) fprintf(stderr, "ckpt_saver: verify '%s': %zu values differ from the step %lld\n", argv[2], bad,
                         (long long)step);
        else if (rank == 0) printf("ok %lld\n", (long long)step);
        rc = bad ? 1 : 0;
    }
done:
    ember_sebc_destroy(s);
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
    free(w);
    free(m);
    MPI_Finalize();
    return rc;
}
