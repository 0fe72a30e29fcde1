// Writes the seed corpus of fuzz_checkpoint: real checkpoints of the collection of
// checkpoint_tables.h, saved by the library (world size 1) under every plan, with small and
// default record sizes, blobs (one empty), steps, and a second generation, each stored in the
// target's input format (checkpoint_tables.h) as OUT_DIR/<name>.
// Usage: fuzz_checkpoint_seeds OUT_DIR   (scripts/fuzz.sh --seeds; the output is committed)
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "checkpoint_tables.h"
#include "ember/state.h"
#include "fuzz_input.h"

// The whole of file `path` (malloc'd; *n its size), or NULL.
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)size + 1)) && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = (size_t)size;
    return buf;
}

typedef struct seed {
    const char *name;
    int save_shift, load_ctl; // the saving plan; the control byte of the input
    size_t chunk;
    int blobs, saves;         // blobs saved; saves into the directory (the generation)
} seed;

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    static const seed seeds[] = {
        {"dp_default_chunk", 0, 0x01, 0, 0, 1},
        {"tw_small_records_blobs", 1, 0x13, 64, 2, 1},
        {"cw_records_of_one_row", 2, 0x24, 7, 0, 1},
        {"rw_blobs_gen2", 3, 0x35, 0, 2, 2},
        {"twrw_crc_rewrite", 4, 0x08 | 0x02, 64, 1, 1},
        {"grid_gen3_crc_rewrite", 5, 0x18 | 0x00, 4096, 2, 3},
    };
    MPI_Init(&argc, &argv);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    const char *tmp = fuzz_dir("checkpoint-seeds");
    int rc = 0;
    if (!tmp || ember_ctx_create(&cc, &ctx) != EMBER_OK || ember_comm_create(ctx, MPI_COMM_WORLD, &comm) != EMBER_OK)
        rc = 1;
    static const char trainer[] = "{\"trainer\": \"ember train\", \"steps\": 12}";
    const uint8_t dense[24] = {0, 1, 2, 3, 0xff, 0x7f, 0x80, 0, 0, 0xc0, 0x7f, 9};
    for (size_t i = 0; rc == 0 && i < sizeof seeds / sizeof seeds[0]; i++) {
        const seed *sd = &seeds[i];
        char ck[512], path[600];
        snprintf(ck, sizeof ck, "%s/%s", tmp, sd->name);
        ember_sebc *s = NULL;
        if (ck_collection(comm, sd->save_shift, 100 + i, &s) != EMBER_OK) {
            rc = 1;
            break;
        }
        const ember_checkpoint_blob blobs[2] = {{.name = "trainer.json", .data = trainer, .bytes = sizeof trainer - 1},
                                                {.name = "empty", .data = dense, .bytes = 0}};
        const ember_checkpoint_blob more[1] = {{.name = "dense.bin", .data = dense, .bytes = sizeof dense}};
        ember_checkpoint_options o = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
        o.chunk_bytes = sd->chunk;
        o.blobs = sd->blobs == 1 ? more : blobs;
        o.num_blobs = sd->blobs;
        for (int g = 0; g < sd->saves && rc == 0; g++) {
            for (int32_t t = 0; t < CK_T; t++) ember_sebc_set_step(s, t, 7 * g + t);
            if (ember_checkpoint_save(s, ck, &o) != EMBER_OK) {
                fprintf(stderr, "%s: %s\n", sd->name, ember_ctx_errmsg(ctx));
                rc = 1;
            }
        }
        ember_sebc_destroy(s);
        size_t nm = 0, nb = 0;
        snprintf(path, sizeof path, "%s/manifest.json", ck);
        uint8_t *m = slurp(path, &nm);
        snprintf(path, sizeof path, "%s/g%d-r0.bin", ck, sd->saves);
        uint8_t *b = slurp(path, &nb);
        snprintf(path, sizeof path, "%s/%s", argv[1], sd->name);
        FILE *f = fopen(path, "wb");
        const uint8_t ctl = (uint8_t)sd->load_ctl, zero = 0;
        if (rc || !m || !b || !f || memchr(m, 0, nm) || fwrite(&ctl, 1, 1, f) != 1 || fwrite(m, 1, nm, f) != nm ||
            fwrite(&zero, 1, 1, f) != 1 || fwrite(b, 1, nb, f) != nb)
            rc = 1;
        if (f && fclose(f) != 0) rc = 1;
        if (!rc) printf("%s: %zu bytes of manifest, %zu of records\n", path, nm, nb);
        free(m);
        free(b);
        snprintf(path, sizeof path, "%s/manifest.json", ck); // the checkpoint's own files, then its folder
        unlink(path);
        snprintf(path, sizeof path, "%s/g%d-r0.bin", ck, sd->saves);
        unlink(path);
        rmdir(ck);
    }
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
    MPI_Finalize();
    return rc;
}
