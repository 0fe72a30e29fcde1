// trainstate.h — the trainer's part of a checkpoint, and the save directories of `ember train`.
//
// A checkpoint of `ember train` is one library checkpoint directory (include/ember/state.h:
// every table's weights, optimizer state and step counter) holding these blobs besides:
//   trainer.json   the configuration and the run's position, JSON text:
//                  {"format": "ember-train/1", "world_size", "model": {...}, "data": {...},
//                   "training": {...}, "storage": {...}, "position": {"epoch", "next_batch",
//                   "steps", "samples", "skipped_batches"}, "dense_optimizer": {"kind", "step"},
//                   "digest": {...}}; the configuration's members are the rows of
//                  trainstate_fields() (docs/dlrm.md, Resume, lists every field);
//   dense.params   the dense parameter slab, little-endian f32 [n] (dlrm.h's layout);
//   dense.m1       the dense optimizer's first state (Adagrad's sum of squares, Adam's first
//                  moment), little-endian f32 [n]; absent for SGD;
//   dense.m2       Adam's second moment, little-endian f32 [n]; Adam only.
// The run has no random generator with mutable state: synthetic sample i of a split is a pure
// function of (seed, split, i) (synth.h), the dense and embedding initial values are drawn from
// the seed when the model is created (then overwritten by the checkpoint), and the fp32 tables
// use no stochastic rounding. The seed, the data position and the parameters are the whole state.
//
// A save directory (--save_dir DIR) holds one checkpoint per saved step, DIR/step-<step, 10
// digits>/; a step directory without manifest.json is a save that never committed.
#ifndef EMBER_APP_TRAINSTATE_H
#define EMBER_APP_TRAINSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlrm.h"
#include "ember/state.h"
#include "train.h"

#define TRAINSTATE_FORMAT "ember-train/1"
#define TRAINSTATE_BLOB "trainer.json"
#define TRAINSTATE_PATH_MAX 4096

// Where a run stands after its last step: the next training batch to read is global batch
// `next_batch` of epoch `epoch` (== the training set's batch count at the end of an epoch).
typedef struct train_position {
    int32_t epoch;
    int64_t next_batch;
    int64_t steps;           // optimizer steps taken since the start of the run
    int64_t samples;         // training samples consumed by those steps
    int64_t skipped_batches; // global batches without a usable line on any rank (Criteo)
} train_position;

#define TRAINSTATE_MAX_STRINGS 4

typedef struct trainstate {
    train_options cfg;        // the run's options: the fields of trainstate_fields() as recorded
                              // (the rest train_options_default's); its strings (data_path,
                              // eval_data_path) point into this state
    int32_t world_size;       // ranks that wrote it
    int64_t num_dense_params; // n of the dense blobs
    train_position pos;
    int64_t dense_step;       // the dense optimizer's step counter (Adam's bias correction)
    uint64_t digest_losses;   // --digest's running hashes up to pos: every step's loss and every
    uint64_t digest_outputs;  // evaluation's outputs, so a resumed run ends with the same line
    char *strings[TRAINSTATE_MAX_STRINGS]; // the copies cfg's strings point to (trainstate_free)
} trainstate;

void trainstate_free(trainstate *ts);

// ---- The configuration in trainer.json: one table --------------------------------------------
// Every option of `ember train` that shapes the model or its data is a row here: trainer.json
// records it, `ember train --resume` compares it (TS_SAME) and `ember eval --load` rebuilds the
// model from it. The options that are no row are trainstate_free_flags(): free to change on resume
// (placement, threads, output...). tests/unit/test_dlrm_trainstate.c checks that every option of
// cmd_train_flags() is one or the other, so a new option needs a decision.

typedef enum trainstate_kind {
    TS_INT,    // a JSON number, an integer in [lo, hi], in an int32_t or int64_t field
    TS_SEED,   // a decimal string in a uint64_t field (JSON numbers are exact only to 2^53)
    TS_REAL,   // a JSON number in a double or float field
    TS_NAME,   // names(v) of an enum or bool field
    TS_PATH,   // a string or null in a const char * field
    TS_ROWS,   // [26] row counts in 1..2^48, int64_t[DLRM_NUM_SPARSE]
    TS_HOTS,   // [26] ids per sample in lo..hi, int32_t[DLRM_NUM_SPARSE]
    TS_LAYERS, // a list of 1 to TRAIN_MAX_LAYERS sizes in 1..65536, int32_t[], the count at count_at
    TS_TABLES, // a list of table (or feature) indices, a uint32_t bit mask (bit f: table f)
} trainstate_kind;

typedef enum trainstate_rule {
    TS_SAME,       // the model or its data: a resume must give the same value
    TS_MAY_CHANGE, // recorded (eval --load's, and a resume's default where train.c says so); may change
} trainstate_rule;

typedef enum trainstate_when {
    TS_ALWAYS,
    TS_SYNTHETIC,     // compared when the checkpoint's run is on synthetic data
    TS_COLLISIONLESS, // compared when the checkpoint's tables are hashed (--hash collisionless)
    TS_DCN,           // compared when the checkpoint's model has the cross net (--interaction dcn)
} trainstate_when;

typedef struct trainstate_field {
    const char *flag;             // the option of ember train that sets it, without the dashes
    const char *also;             // another option that sets it (num_embeddings, adagrad), or NULL
    const char *section, *key;    // its member of trainer.json: section.key
    trainstate_kind kind;
    size_t at, size;              // its field of train_options
    size_t count_at;              // TS_LAYERS: the count's field (int32_t)
    int64_t lo, hi;               // TS_INT: the range read back
    const char *(*names)(int v);  // TS_NAME: cli.h's names of its values
    trainstate_rule rule;
    trainstate_when when;
    bool added;                   // not in checkpoints of older embers: absent means the default
    const char *what;             // a refused resume's words: "--resume: <what> X in the checkpoint, Y here"
} trainstate_field;

// The rows, in trainer.json's order, *n of them.
const trainstate_field *trainstate_fields(int *n);

// The options of ember train that trainer.json does not record, free to change on resume, NULL
// terminated, each "name: why".
const char *const *trainstate_free_flags(void);

// Copies every field of trainstate_fields() from the checkpoint's options into `o` (ember eval
// --load: the model and data the checkpoint's run had). Strings point into ts. Local.
void trainstate_apply(const trainstate *ts, train_options *o);

// trainer.json of ts, NUL-terminated in *text (free with trainstate_text_free). Local.
// Returns EMBER_OK or EMBER_ERR_NOMEM.
ember_status trainstate_encode(ember_ctx *ctx, const trainstate *ts, char **text);
void trainstate_text_free(char *text); // NULL accepted

// Where a saved model's blobs are: an open checkpoint of ember train (ckpt), or a serving bundle
// of ember export in directory `bundle` (include/ember/quant.h), which holds trainer.json and
// dense.params as a checkpoint does (no dense optimizer state).
typedef struct saved_model {
    ember_checkpoint *ckpt;
    const char *bundle;
} saved_model;

// Whether directory dir holds a serving bundle (its bundle.json). Local.
bool saved_is_bundle(const char *dir);

// Reads and parses trainer.json of a saved model `dir` into *ts (trainstate_free it, also on
// failure). Local. Returns EMBER_OK, EMBER_ERR_FORMAT ("'DIR' is not a checkpoint of ember train:
// it has no trainer.json", or a field named as missing or malformed), EMBER_ERR_IO,
// EMBER_ERR_NOMEM.
ember_status trainstate_read(ember_ctx *ctx, const saved_model *c, const char *dir, trainstate *ts);

// Parses trainer.json `text` (NUL-terminated; `dir` names its checkpoint in messages) into *ts
// (trainstate_free it, also on failure). Local. Returns EMBER_OK, EMBER_ERR_FORMAT (not JSON,
// another format, a field missing or malformed: named), EMBER_ERR_NOMEM.
ember_status trainstate_decode(ember_ctx *ctx, const char *dir, const char *text, trainstate *ts);

// Checks that `here` trains the model the checkpoint holds on the same data: every TS_SAME field
// of trainstate_fields() (where its `when` holds for the checkpoint), then the held-out head of a
// Criteo --data_path (where the training lines start). The first difference is the error, e.g.
// "--resume: embedding optimizer is rowwise_adagrad in the checkpoint, adam here". Local.
// Returns EMBER_OK or EMBER_ERR_INVALID_ARG.
ember_status trainstate_check(ember_ctx *ctx, const trainstate *ts, const train_options *here);

// The dense blobs of model m (dense.params, and dense.m1 / dense.m2 as its optimizer has them)
// into blobs[*n] (at most 3). On a little-endian host they point at the model's own arrays; else
// at a converted copy in *scratch (free with ember_ctx_free; NULL when none). Local.
// Returns EMBER_OK or EMBER_ERR_NOMEM.
ember_status trainstate_dense_blobs(ember_ctx *ctx, dlrm_model *m, ember_checkpoint_blob *blobs, int32_t *n,
                                    void **scratch);

// Reads the dense blobs of a saved model into model m and sets its optimizer's step (a bundle:
// dense.params alone, the optimizer's state left as it is). flag: the option that named it
// (--resume, --load), for messages. Local. Returns EMBER_OK, EMBER_ERR_FORMAT (a blob missing or
// of another size than the model's parameter count: named, "--load 'DIR': the checkpoint has no
// dense.params (...)"), EMBER_ERR_IO, EMBER_ERR_NOMEM.
ember_status trainstate_read_dense(ember_ctx *ctx, const saved_model *c, const char *flag, const char *dir,
                                   dlrm_model *m, int64_t dense_step);

// ---- Save directories ------------------------------------------------------------------------

// "DIR/step-0000000042" into out[cap]; false when it does not fit.
bool ckpt_step_path(const char *save_dir, int64_t step, char *out, size_t cap);

// The step of a directory entry named "step-" and at least 10 digits, else -1.
int64_t ckpt_step_of(const char *name);

// Creates save directory `dir` if missing (its parent must exist). Local. Returns EMBER_OK or
// EMBER_ERR_IO ("--save_dir 'DIR': cannot create it: reason", or "... is not a directory").
ember_status ckpt_make_save_dir(ember_ctx *ctx, const char *dir);

// Creates step directory `path` of a save about to start, *made telling whether it did (false:
// it was there). Local. Returns EMBER_OK, or EMBER_ERR_IO ("--save_dir: cannot create 'PATH':
// reason").
ember_status ckpt_make_step_dir(ember_ctx *ctx, const char *path, bool *made);

// After a failed save into step directory `path` that ckpt_make_step_dir made: removes it and
// whatever the save left in it, leaving the context's message (the save's) alone. A directory
// that was there before the save is never the caller's to discard. Local. Returns whether
// `path` is gone.
bool ckpt_discard_step_dir(const char *path);

typedef struct ckpt_entry {
    int64_t step;
    bool committed; // holds manifest.json
} ckpt_entry;

// The step-* directories of save directory `dir`, highest step first, in *out[*n] (free() it).
// Local. Returns EMBER_OK, EMBER_ERR_IO ("FLAG 'DIR': cannot open it: reason"), EMBER_ERR_NOMEM.
ember_status ckpt_list(ember_ctx *ctx, const char *flag, const char *dir, ckpt_entry **out, int32_t *n);

// Finds the checkpoint `dir` names for `flag` (--resume, --load, ckpt info): dir itself when it
// holds manifest.json, else the highest step-* directory in it whose manifest opens
// (ember_checkpoint_open). *path gets it; *save_dir the save directory it lies in (dir, or the
// parent of a directory named step-*), or "" for a checkpoint directory of another name.
// Local. Returns EMBER_OK, EMBER_ERR_IO (dir missing, or no committed checkpoint in it: the
// message says which), EMBER_ERR_INVALID_ARG (a path longer than TRAINSTATE_PATH_MAX).
ember_status ckpt_resolve(ember_ctx *ctx, const char *flag, const char *dir, char path[TRAINSTATE_PATH_MAX],
                          char save_dir[TRAINSTATE_PATH_MAX]);

// After checkpoint `step` of save directory `dir` committed: keeps it and the keep - 1 newest
// committed step directories below it, removes the older committed ones and every unfinished one
// (no manifest.json) below `step`; directories of higher steps and anything not named step-* are
// left alone. *removed (may be NULL) counts the directories removed. Local.
// Returns EMBER_OK or EMBER_ERR_IO (the path and the reason).
ember_status ckpt_prune(ember_ctx *ctx, const char *dir, int64_t step, int32_t keep, int32_t *removed);

#endif
