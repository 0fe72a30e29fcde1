// Reading the LFQ golden files (tests/data/lfq, described in docs/lfq.md) and comparing
// against them. Test-side only: shares no code with src/lfq. Needs cJSON (pkg-config libcjson);
// tests/lfq.cmake links it into the LFQ test executables only.
#ifndef EMBER_TEST_LFQ_GOLDEN_H
#define EMBER_TEST_LFQ_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ember/lfq.h"

// A golden tensor {"shape", "dtype", "data"}, every dtype widened to double (int64 values are
// exact below 2^53, bools are 0/1).
typedef struct lfq_tensor {
    int ndim;
    int64_t shape[8];
    int64_t numel;
    double *data; // malloc'd
} lfq_tensor;

// The directory of golden files: $EMBER_LFQ_GOLDEN_DIR, else $EMBER_TEST_DATA/lfq, else
// tests/data/lfq relative to the working directory. Writes into buf[n].
const char *lfq_golden_dir(char *buf, size_t n);
// Sorted full paths of the *.json files in dir; returns the count (-1 if dir cannot be read).
// Free with lfq_golden_free_list.
int lfq_golden_list(const char *dir, char ***paths);
void lfq_golden_free_list(char **paths, int n);

// Parses a file; NULL (with a note on stderr) on failure. Free with cJSON_Delete.
cJSON *lfq_golden_load(const char *path);
// The node at a '/'-separated path ("distributed/2/ranks/0/grads/correct/x"); components
// that address arrays are indices. NULL if absent.
const cJSON *lfq_golden_at(const cJSON *root, const char *path);
// Whether the node exists and is not JSON null.
bool lfq_golden_has(const cJSON *root, const char *path);
// A number at path: a JSON number or bool, or a one-element tensor; `dflt` when absent or null.
double lfq_golden_number(const cJSON *root, const char *path, double dflt);
// A string at path, or NULL.
const char *lfq_golden_string(const cJSON *root, const char *path);
// Loads the tensor at path; false if absent or malformed.
bool lfq_golden_tensor(const cJSON *root, const char *path, lfq_tensor *t);
void lfq_tensor_free(lfq_tensor *t);

// The module configuration described by the file's `config` object, in dtype `dt`. False, with
// a note on stderr, for settings these tests cannot map (an activation other than identity,
// another entropy or l2norm eps, a frac_per_sample_entropy < 1 whose random draw cannot match).
bool lfq_golden_config(const cJSON *root, ember_dtype dt, ember_lfq_config *cfg);
// Writes params/<name> into every parameter the module has; false if one is missing or misshapen.
bool lfq_golden_set_params(const cJSON *root, ember_lfq *q);

// Conversions between double and a module dtype. lfq_buf_from_f64 returns a malloc'd buffer.
void *lfq_buf_from_f64(const double *src, int64_t n, ember_dtype dt);
void lfq_buf_to_f64(const void *src, int64_t n, ember_dtype dt, double *dst);

// max_i |a_i - b_i| / max_i |b_i| (relative to the largest reference entry; 0/0 = 0, and the
// absolute error when the reference is all zeros).
double lfq_rel_to_max(const double *a, const double *b, int64_t n);
// Loss scalars are compared relatively, and absolutely below this magnitude (nats): the golden
// per-sample entropy at tau = 100 carries ~1e-17 absolute rounding from p log p near p = 1
// (1.1e-7 relative where PSE = 8.4e-11; checked against 40-digit arithmetic).
#define LFQ_SCALAR_FLOOR 1e-3
// |a - b| / max(|b|, floor): relative error of a scalar, absolute below `floor` (and when b = 0).
double lfq_rel_scalar(double a, double b, double floor);

#endif
