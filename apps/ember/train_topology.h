// The planner's view of the machine for `ember train`: hosts from MPI, bandwidths probed or
// given, the plan for --sharding auto and the predicted embedding step of any plan.
#ifndef EMBER_APP_TRAIN_TOPOLOGY_H
#define EMBER_APP_TRAIN_TOPOLOGY_H

#include "ember.h"

typedef struct train_topology {
    int32_t hosts;
    double intra_bw, inter_bw;  // bytes/s used for the prediction
    int intra_given, inter_given;
    double round_s;             // probed seconds of one collective round
    double disk_bw;             // bytes/s of tiered tables' files (given or probed when there are any; else 0)
    int disk_given;             // disk_bw is --disk_gbps's
    int64_t disk_probe_bytes;   // the probe's file (0: no probe)
    double predicted_s;         // the slowest rank's predicted embedding step (NAN: none)
    char why_none[160];         // why there is no prediction
} train_topology;

#define TRAIN_DISK_PROBE_MIN ((int64_t)1 << 20)
#define TRAIN_DISK_PROBE_MAX ((int64_t)64 << 20)

// The bytes of the disk probe's file for the tiered tables of ec (cache_rows > 0): what their files
// take (every row's weights and optimizer state), clamped to [TRAIN_DISK_PROBE_MIN,
// TRAIN_DISK_PROBE_MAX], so that a disk that holds the tables holds the probe; 0 without tiered
// tables. Local.
int64_t train_topology_disk_probe_bytes(const ember_ebc_config *ec);

// Detects the hosts of comm and probes the bandwidths (4 MiB, 3 rounds; given ones, Gbit/s > 0,
// replace them) and one collective round's time; with tiered tables the disk's rate too (given,
// disk_gbps > 0, or probed by rank 0 in ec->ssd_dir with train_topology_disk_probe_bytes). With
// plan_auto, fills plan[ec->num_tables] with the planner's placement: on more than one host from
// the predicted time, on one host as ever (bytes). Then predicts the step of plan. batch: samples
// per rank; pooling: [ec->num_features] ids per sample (NULL: one each). Collective. Returns what ember_plan_detect_topology, ember_plan_probe_disk and
// ember_plan_create return (agreed on by every rank); a prediction that fails is no failure (tt
// says why). group > 0 (2D, --sharding_group_size): plan is for the G = group ranks of a sharding
// group, placed as on the hosts of ranks [0, G); no prediction (the replicas' sum is not modelled).
ember_status train_topology_plan(ember_comm *comm, const ember_ebc_config *ec, int32_t batch, const float *pooling,
                                 double intra_gbps, double inter_gbps, double disk_gbps, int plan_auto, int32_t group,
                                 ember_table_plan *plan, train_topology *tt);

// ember train --rebalance_every: a placement for the ranks' measured speeds. busy[W]: each rank's
// seconds in the embedding calls over the last window, less their waits for other ranks. The
// model's load of the current plan cur on each rank (as the first plan was made: predicted
// seconds across hosts, bytes read and sent on one host) over its busy seconds is its speed,
// normalised to a mean of 1 over the ranks that have both (1 for the others), averaged with the
// speed[W] given (the last window's; 0: none) and clamped to [1/20, 20], into speed[W] (in/out); the planner places the tables for those speeds into next (release it with
// ember_plan_release). *cur_load and *next_load: the slowest rank's load over its speed under
// each plan (the model's unit). host_of[W]: the ranks' hosts (ember_plan_detect_topology). Local
// and pure: every rank given the same busy gets the same plan. Returns what ember_plan_predict
// and ember_plan_create return.
ember_status train_topology_rebalance(ember_ctx *ctx, const ember_ebc_config *ec, int32_t batch, const float *pooling,
                                      const train_topology *tt, const int32_t *host_of, int32_t W,
                                      const ember_table_plan *cur, const double *busy, double *speed,
                                      ember_table_plan *next, double *cur_load, double *next_load);

#endif
