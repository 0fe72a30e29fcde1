// `ember train`'s topology and prediction (train_topology.h).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train_topology.h"

// The disk probe's file: at most what the tiered tables' files take (all of their rows, weights
// and optimizer state), at most 64 MiB, at least 1 MiB (a smaller file measures the call, not the
// disk). 0 without tiered tables.
int64_t train_topology_disk_probe_bytes(const ember_ebc_config *ec) {
    double files = 0.0;
    for (int32_t t = 0; t < ec->num_tables; t++) {
        if (ec->tables[t].cache_rows <= 0) continue;
        ember_tensor_info info[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(&ec->tables[t], info);
        for (int32_t k = 0; k < n; k++)
            files += (double)info[k].rows * (double)info[k].cols * (double)ember_dtype_size(info[k].dtype);
    }
    if (files <= 0.0) return 0;
    const double lo = (double)TRAIN_DISK_PROBE_MIN, hi = (double)TRAIN_DISK_PROBE_MAX;
    return (int64_t)(files < lo ? lo : files > hi ? hi : files);
}

// The planner's configuration for a plan made as ember train makes them: on more than one host
// from the predicted time (tt's bandwidths and round), on one host on bytes.
static ember_plan_config planning_config(const train_topology *tt, const int32_t *host_of, int32_t W, int32_t batch,
                                         const float *pooling) {
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = W;
    pc.batch_size = batch;
    pc.pooling_factor = pooling;
    pc.disk_bw = tt->disk_bw;
    if (tt->hosts > 1) {
        pc.host_of = host_of;
        pc.intra_host_bw = tt->intra_bw;
        pc.inter_host_bw = tt->inter_bw;
        pc.round_s = tt->round_s;
    }
    return pc;
}

ember_status train_topology_plan(ember_comm *comm, const ember_ebc_config *ec, int32_t batch, const float *pooling,
                                 double intra_gbps, double inter_gbps, double disk_gbps, int plan_auto, int32_t group,
                                 ember_table_plan *plan, train_topology *tt) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t W = ember_comm_size(comm);
    memset(tt, 0, sizeof *tt);
    tt->predicted_s = NAN;
    tt->intra_given = intra_gbps > 0;
    tt->inter_given = inter_gbps > 0;
    int32_t *host_of = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)W);
    double *secs = ember_ctx_alloc(ctx, sizeof(double) * (size_t)W);
    ember_status st = host_of && secs ? EMBER_OK
                                      : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "topology: out of memory for %d ranks",
                                                            (int)W);
    st = ember_comm_agree(comm, st);
    double intra = 0, inter = 0, round = 0;
    if (st == EMBER_OK)
        st = ember_plan_detect_topology(comm, host_of, &tt->hosts, (int64_t)4 << 20, 3, &intra, &inter,
                                        &round);
    if (st == EMBER_OK) {
        if (tt->intra_given) intra = intra_gbps * 1e9 / 8;
        if (tt->inter_given) inter = inter_gbps * 1e9 / 8;
        tt->intra_bw = intra;
        tt->inter_bw = inter;
        tt->round_s = round;
        // Tables on disk: the rate given, or rank 0 measures the disk (a file of at most the
        // tables' files written, flushed and read back) and every rank plans with its figure.
        const int64_t probe = train_topology_disk_probe_bytes(ec);
        if (probe > 0 && disk_gbps > 0) {
            tt->disk_given = 1;
            tt->disk_bw = disk_gbps * 1e9 / 8;
        } else if (probe > 0) {
            tt->disk_probe_bytes = probe;
            st = ember_comm_rank(comm) == 0 ? ember_plan_probe_disk(ctx, ec->ssd_dir, probe, &tt->disk_bw) : EMBER_OK;
            st = ember_comm_agree(comm, st);
            if (st == EMBER_OK) st = ember_comm_bcast(comm, &tt->disk_bw, sizeof tt->disk_bw, 0);
        }
        if (group > 0) { // 2D: a group's plan, on the hosts of the first group's ranks
            train_topology g = *tt;
            g.hosts = 0;
            for (int32_t q = 0; q < group; q++) g.hosts = host_of[q] + 1 > g.hosts ? host_of[q] + 1 : g.hosts;
            ember_plan_config pc = planning_config(&g, host_of, group, batch, pooling);
            if (plan_auto && st == EMBER_OK) st = ember_plan_create(ctx, ec, &pc, plan, NULL);
            snprintf(tt->why_none, sizeof tt->why_none,
                     "%d sharding groups of %d ranks (the replicas' gradient sum is not modelled)", (int)(W / group),
                     (int)group);
        }
        ember_plan_config pc = planning_config(tt, host_of, W, batch, pooling);
        if (group <= 0 && plan_auto && st == EMBER_OK) st = ember_plan_create(ctx, ec, &pc, plan, NULL);
        if (group <= 0 && st == EMBER_OK) {
            pc.host_of = host_of;
            // One rank sends nothing to others: any intra bandwidth predicts the same. With one
            // rank per host nothing stays inside a host (no intra pair to probe; the planner
            // accepts 0 there).
            pc.intra_host_bw = W == 1 && intra <= 0 ? 1e9 : intra;
            pc.inter_host_bw = inter;
            pc.round_s = round;
            ember_plan_stats ps = {.step_seconds = secs};
            if ((tt->hosts == 1 && pc.intra_host_bw <= 0) || (tt->hosts > 1 && inter <= 0)) {
                snprintf(tt->why_none, sizeof tt->why_none, "no bandwidth measured between ranks");
            } else if (ember_plan_predict(ctx, ec, &pc, plan, &ps) != EMBER_OK) {
                snprintf(tt->why_none, sizeof tt->why_none, "%s", ember_ctx_errmsg(ctx));
            } else {
                tt->predicted_s = 0;
                for (int32_t q = 0; q < W; q++)
                    if (secs[q] > tt->predicted_s) tt->predicted_s = secs[q];
            }
        }
    }
    ember_ctx_free(ctx, secs);
    ember_ctx_free(ctx, host_of);
    return st;
}

// The slowest rank's load over its speed: load[q] / speed[q], largest.
static double slowest(const double *load, const double *speed, int32_t W) {
    double m = 0;
    for (int32_t q = 0; q < W; q++) m = load[q] / speed[q] > m ? load[q] / speed[q] : m;
    return m;
}

ember_status train_topology_rebalance(ember_ctx *ctx, const ember_ebc_config *ec, int32_t batch, const float *pooling,
                                      const train_topology *tt, const int32_t *host_of, int32_t W,
                                      const ember_table_plan *cur, const double *busy, double *speed,
                                      ember_table_plan *next, double *cur_load, double *next_load) {
    ember_plan_config pc = planning_config(tt, host_of, W, batch, pooling); // as the first plan was made
    const int timed = tt->hosts > 1;
    double *load = ember_ctx_alloc(ctx, sizeof(double) * 2 * (size_t)W);
    if (!load) return ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "--rebalance_every: out of memory for %d ranks", (int)W);
    double *nload = load + W;
    ember_plan_stats ps = timed ? (ember_plan_stats){.step_seconds = load} : (ember_plan_stats){.step_bytes = load};
    ember_status st = ember_plan_predict(ctx, ec, &pc, cur, &ps);
    if (st == EMBER_OK) {
        double sum = 0;
        int32_t n = 0;
        for (int32_t q = 0; q < W; q++)
            if (load[q] > 0 && busy[q] > 0) sum += load[q] / busy[q], n++;
        for (int32_t q = 0; q < W; q++) {
            double v = load[q] > 0 && busy[q] > 0 ? load[q] / busy[q] / (sum / n) : 1.0;
            if (speed[q] > 0) v = 0.5 * (v + speed[q]); // with the last window's, against noise
            speed[q] = v < 0.05 ? 0.05 : v > 20 ? 20 : v;
        }
        *cur_load = slowest(load, speed, W);
        pc.rank_speed = speed;
        st = ember_plan_create(ctx, ec, &pc, next, NULL);
    }
    if (st == EMBER_OK) {
        ps = timed ? (ember_plan_stats){.step_seconds = nload} : (ember_plan_stats){.step_bytes = nload};
        st = ember_plan_predict(ctx, ec, &pc, next, &ps);
        if (st != EMBER_OK) ember_plan_release(ctx, next, ec->num_tables);
        else *next_load = slowest(nload, speed, W);
    }
    ember_ctx_free(ctx, load);
    return st;
}
