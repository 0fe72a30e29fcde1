// checkpoint_tables.h — the collection fuzz_checkpoint loads into and fuzz_checkpoint_seeds saves
// its seed checkpoints from, and the fuzz input's format (both programs build and read it).
//
// Input: one control byte, manifest.json's text, one NUL byte, then the bytes of the record file
// g<G>-r0.bin (G: the manifest's generation when it has one, else 1). Control byte:
//   bits 0-2  plan of the collection loaded into: table t under scheme (bits + t) % 6 (dp, tw,
//             cw, rw, twrw, grid), so every load reshards some tables between column slicings
//   bit 3     rewrite every record's and blob's "crc32" to the CRC of the bytes it names (when
//             they lie in the file), so that mutated records and offsets get past the CRC check
//   bits 4-5  chunk_bytes of the load: the default, 64, 7, 4096
// Five tables of every weight dtype and optimizer-state shape (per row, per element, two
// states), one of a single row; world size 1 (every piece of every scheme on this rank).
#ifndef EMBER_FUZZ_CHECKPOINT_TABLES_H
#define EMBER_FUZZ_CHECKPOINT_TABLES_H

#include <string.h>

#include "ember/shard.h"

#define CK_T 5
#define CK_SCHEMES 6
static const char *const CK_NAMES[CK_T] = {"w32", "h16", "b16", "one", "grid"};
static const int64_t CK_ROWS[CK_T] = {11, 7, 5, 1, 9};
static const int32_t CK_DIMS[CK_T] = {6, 5, 4, 3, 8};
static const ember_dtype CK_DTYPES[CK_T] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16, EMBER_DTYPE_F32,
                                            EMBER_DTYPE_F32};
static const ember_optim_kind CK_OPTS[CK_T] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_ADAGRAD,
                                               EMBER_OPT_SGD, EMBER_OPT_PARTIAL_ROWWISE_ADAM};

static const size_t CK_CHUNKS[4] = {0, 64, 7, 4096};

// Table t's plan under scheme s on one rank (ranks: the caller's 4 entries).
static inline ember_table_plan ck_plan(int s, int t, int32_t *ranks) {
    ember_table_plan p;
    memset(&p, 0, sizeof p);
    p.ranks = ranks;
    ranks[0] = ranks[1] = ranks[2] = ranks[3] = 0;
    switch (s % CK_SCHEMES) {
    case 0: p.scheme = EMBER_SHARD_DATA_PARALLEL; break;
    case 1: p.scheme = EMBER_SHARD_TABLE_WISE; break;
    case 2:
        p.scheme = EMBER_SHARD_COLUMN_WISE;
        p.num_shards = 2 + t % 2 <= CK_DIMS[t] ? 2 + t % 2 : CK_DIMS[t];
        break;
    case 3: p.scheme = EMBER_SHARD_ROW_WISE; break;
    case 4:
        p.scheme = EMBER_SHARD_TABLE_ROW_WISE;
        p.group_size = 1;
        break;
    default:
        p.scheme = EMBER_SHARD_GRID;
        p.num_shards = 2;
        p.group_size = 1;
    }
    p.num_ranks = ember_table_plan_ranks_needed(&p);
    if (!p.num_ranks) p.ranks = NULL;
    return p;
}

// The five tables on comm (world size 1), table t under scheme (shift + t), initialised from seed.
static inline ember_status ck_collection(ember_comm *comm, int shift, uint64_t seed, ember_sebc **out) {
    ember_table_config tc[CK_T];
    ember_feature_config fc[CK_T];
    ember_table_plan plan[CK_T];
    int32_t ranks[CK_T][4];
    for (int t = 0; t < CK_T; t++) {
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = CK_OPTS[t];
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc[t].name = CK_NAMES[t], tc[t].rows = CK_ROWS[t], tc[t].dim = CK_DIMS[t], tc[t].dtype = CK_DTYPES[t];
        tc[t].init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1}, tc[t].optim = o;
        fc[t] = (ember_feature_config){.name = CK_NAMES[t], .table = t};
        plan[t] = ck_plan(shift + t, t, ranks[t]);
    }
    ember_ebc_config cfg = {.tables = tc, .num_tables = CK_T, .features = fc, .num_features = CK_T,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = seed};
    return ember_sebc_create(comm, &cfg, plan, EMBER_GRAD_MEAN, out);
}

#endif
