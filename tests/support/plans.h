// Hand-made plans for the distributed tests: every scheme placed over the ranks in a way that
// depends on the table, so that a collection of several tables spreads over every rank and
// exercises the uneven corners (two shards on one rank, empty row blocks of one-row tables).
#ifndef EMBER_TEST_PLANS_H
#define EMBER_TEST_PLANS_H

#include "ember.h"

// Table t (of `dim` columns) under scheme sc on W ranks; its ranks live in store (at least 8
// entries). Table-wise: rank t + 1; column-wise: min(dim, 3) slices on ranks t, t + 1, ...;
// table-row-wise: a group of min(W, 2) ranks counted down from W - 1 + t; grid: min(dim, 2)
// column slices, each row-wise over min(W, 2) ranks, slice c's row block k on rank t + k (+ c on
// odd tables: even tables hold both slices of a row block on one rank, odd ones two row blocks
// on one rank at W = 2); data-parallel and row-wise need no ranks. All modulo W.
ember_table_plan test_plan_for(ember_shard_scheme sc, int t, int32_t dim, int W, int32_t *store);

// One table's plan by short name on W ranks (ranks in store, at least 2W entries): "dp"; "tw" on
// rank W - 1; "cw" in 2 slices on ranks 0 and W - 1; "twrw" over every rank counted down from
// W - 1; "grid" in 2 slices of W row blocks, slice c's block k on rank (k + c) % W; anything
// else row-wise. ranks is NULL when the scheme reads none.
ember_table_plan test_plan_named(const char *scheme, int W, int32_t *store);

#endif
