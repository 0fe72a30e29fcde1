// shuffle.h — `ember preprocess --shuffle_seed S`: the training days' rows shuffled jointly, as
// TorchRec's BinaryCriteoUtils.shuffle does (the last step of its Criteo 1TB pipeline): the rows of
// days [first_day, first_day + days) are permuted as one set and cut back into days of their
// original row counts; dense, sparse and label rows move together.
//
// In bounded memory (TorchRec's loads the whole set): each row goes to one of K bucket files
// chosen by the library's counter-based generator at (seed, row); then bucket after bucket is
// loaded, shuffled in memory (Fisher-Yates, generator at (seed, K + bucket)) and appended to the
// output days. Random buckets, each shuffled uniformly, concatenated: a uniformly random
// permutation (the same distribution as TorchRec's, not its draws, which are numpy's). K is the
// smallest count whose expected bucket fits half of `memory_mb`; a bucket that still outgrows it
// fails saying so. The inputs are DIR/day_{d}_{dense,sparse,labels}.npy as ember preprocess
// writes them (float32 [N, 13], int32 [N, 26], int32 [N, 1]); the shuffled days are written as
// .partial files and renamed over them once all are complete; the bucket files live in
// DIR/shuffle.tmp/ and are removed at the end.
#ifndef EMBER_APP_SHUFFLE_H
#define EMBER_APP_SHUFFLE_H

#include <stdint.h>
#include <stdio.h>

// Shuffles the days as above, printing a summary line to `out`. Returns 0, or 1 with one
// "ember preprocess: error: ..." line on stderr naming the file.
int shuffle_days(const char *dir, int first_day, int days, uint64_t seed, int64_t memory_mb, FILE *out);

#endif
