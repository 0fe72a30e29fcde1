// contig.h — `ember preprocess --frequency_threshold T`: the categorical values of day files made
// contiguous per feature, as TorchRec's BinaryCriteoUtils.sparse_to_contiguous does (the step of
// its Criteo 1TB pipeline between tsv_to_npys and the shuffle).
//
// For each of the 26 features, over the days in order and their rows in order: a value seen fewer
// than T times in all the days becomes 1 (when T > 1); every other value becomes the next id of
// its feature, from 2, at its first occurrence. T = 1 gives every value its own id (from 2).
//
// Input: DIR/day_{d}_sparse_raw.npy, int32 [N_d, 26], for d in [first_day, first_day + days).
// Output: DIR/day_{d}_sparse.npy, int32 [N_d, 26], each written as .partial and renamed into
// place once every day is done; then the raw files are removed. A run stopped before that keeps
// the raw files and is redone whole by the next run.
//
// Memory: one open-addressing table per feature (16 bytes a slot, at most 7/10 full). A first pass
// estimates each feature's distinct values (HyperLogLog, 4 KiB a feature); the features are then
// processed in groups whose tables fit `memory_mb`, two passes over the raw files per group (count,
// then assign; one with T = 1). A feature whose table alone exceeds the budget fails naming it
// and the memory it needs. The files are read and written through mappings (the page cache).
#ifndef EMBER_APP_CONTIG_H
#define EMBER_APP_CONTIG_H

#include <stdint.h>
#include <stdio.h>

// The raw hashes' sparse file name, DIR/day_{d}_" CONTIG_RAW ".npy, until the remap.
#define CONTIG_RAW "sparse_raw"

// Remaps the days as above, printing a line per group to `out`. Returns 0, or 1 with one
// "ember preprocess: error: ..." line on stderr naming the file or feature.
int contig_remap(const char *dir, int first_day, int days, int64_t threshold, int64_t memory_mb, FILE *out);

#endif
