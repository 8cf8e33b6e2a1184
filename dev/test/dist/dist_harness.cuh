// dist_harness.cuh: the harness of the data-parallel test (dev/test/dist/test_dist.cu, both model families).
// A job is one training run by `world` ranks,
// threads of this process on one GPU, talking through the communicator's test double (comm_local.cuh).
// The including test defines rank_main, its model's side of one rank's run; this header starts the
// ranks, brings the job's losses and tensors back from rank 0 and compares two runs.
//   static void* rank_main(void* arg) {  // arg: a RankRun
//       ... build on comm_local(&comm, rr->group, rr->rank) (no Comm when rr->group is NULL), init or load,
//       steps rr->job->from .. to, each followed by rank_keep_loss; save; rank_gather_outputs; free ...
//   }
#pragma once
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "../../../llmc/optim/optim.cuh"
#include "comm_local.cuh"
#include "../testing.h"

#define MAX_STEPS 8

// One run: `world` ranks, `accum` micro-steps each; from a fresh init (seed) or a checkpoint (load);
// steps from .. to; then optionally a checkpoint (save). Rank 0 returns the losses and the whole master,
// m and v.
typedef struct {
    int world, accum;
    int zero;            // 1: the optimizer state sharded over the ranks (ZeRO-1), 0: whole on every rank
    uint64_t seed;
    const char* load;    // NULL: init from seed
    int from, to;
    const char* save;    // NULL: none
    float* losses;       // (MAX_STEPS) loss of step s at [s], or NULL
    float *master, *m, *v;  // (num_params) each, or NULL
} Job;

typedef struct {
    const Job* job;
    CommLocal* group;    // NULL when the job has one rank
    int rank;
    int rc;              // 0, or -1 when a checkpoint failed
} RankRun;

static void* rank_main(void* arg);  // the including test's: one rank's run of the job (arg: a RankRun)

// Runs the job on its ranks (threads when world > 1); returns 0, or -1 when a rank failed.
static int run_job(const Job* j) {
    RankRun rr[COMM_LOCAL_MAX];
    pthread_t th[COMM_LOCAL_MAX];
    CommLocal group;
    if (j->world > 1) comm_local_build(&group, j->world);
    for (int r = 0; r < j->world; r++) {
        rr[r].job = j;
        rr[r].group = j->world > 1 ? &group : NULL;
        rr[r].rank = r;
        rr[r].rc = 0;
    }
    if (j->world == 1) {
        rank_main(&rr[0]);
    } else {
        for (int r = 0; r < j->world; r++) pthread_create(&th[r], NULL, rank_main, &rr[r]);
        for (int r = 0; r < j->world; r++) pthread_join(th[r], NULL);
        comm_local_free(&group);
    }
    int rc = 0;
    for (int r = 0; r < j->world; r++) rc |= rr[r].rc;
    return rc;
}

// A job from the init of seed 11, with no checkpoint and no outputs.
static Job job(int world, int accum, int from, int to) {
    Job j;
    memset(&j, 0, sizeof(j));
    j.world = world; j.accum = accum; j.zero = 1; j.seed = 11; j.from = from; j.to = to;
    return j;
}

// After step s: its loss (device, 1 float) into the job's losses on rank 0. Collective.
static void rank_keep_loss(const RankRun* rr, int s, const float* loss, Comm* comm, cudaStream_t stream) {
    float l;
    cuda_check(cudaMemcpyAsync(&l, loss, sizeof(float), cudaMemcpyDeviceToHost, stream));
    comm_sync(comm, stream);
    if (rr->rank == 0 && rr->job->losses) rr->job->losses[s] = l;
}

// At the end of the job: the whole master, m and v of o (each rank holds its shard) into the job's
// outputs on rank 0, gathered through the gradient buffer (optim_gather). Collective.
static void rank_gather_outputs(const RankRun* rr, const OptimState* o, cudaStream_t stream) {
    const Job* j = rr->job;
    float* outs[3] = {j->master, j->m, j->v};  // in the order OPTIM_MASTER, OPTIM_M, OPTIM_V
    for (int t = 0; t < 3; t++) {
        if (!outs[t]) continue;
        const float* full = optim_gather(o, t, stream);
        comm_sync(o->comm, stream);
        if (rr->rank == 0)
            cuda_check(cudaMemcpyAsync(outs[t], full, o->num_params * sizeof(float), cudaMemcpyDeviceToHost, stream));
        comm_sync(o->comm, stream);  // read before any rank gathers the next tensor into its scratch
    }
}

static int files_equal(const char* a, const char* b) {
    FILE* fa = fopen(a, "rb");
    FILE* fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static float max_abs_diff(const float* a, const float* b, size_t n, size_t* where) {
    float worst = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) { worst = d; *where = i; }
    }
    return worst;
}

// Tolerances of two runs of the same data in other configurations (N ranks against accumulation). The
// runs differ only in the order in which the same fp32 gradient contributions are added (the GEMMs'
// accumulation into the gradient against the ranks' sum in rank order): ~1e-7 relative in each
// gradient, and the odd bf16 parameter that rounds the other way. AdamW passes most of that on at the
// same scale, but where a gradient's contributions nearly cancel, the order can flip its sign, and
// AdamW's step, ~lr in size whatever the gradient, flips with it: such elements may differ by up to
// 2·lr a step. So the master weights are compared by their updates since the init, ‖Δa − Δb‖ / ‖Δb‖
// over the whole model: order noise moves few elements (well under 1%), a lost or doubled rank changes
// the direction of most updates (O(1)); 0.05 sits between.
#define LOSS_RTOL 1e-4
#define UPDATE_RTOL 0.05

// Run a against run b: the losses of steps from .. to (la, lb) and the master weights (ma, mb) after
// them, by their updates since init (n floats each).
static void compare_runs(const char* what, const float* la, const float* lb, int from, int to, const float* ma,
                         const float* mb, const float* init, size_t n) {
    double worst = 0.0, d2 = 0.0, u2 = 0.0;
    for (int s = from; s < to; s++) worst = fmax(worst, fabs((double)la[s] - lb[s]) / fabs((double)lb[s]));
    size_t where = 0, moved = 0;
    float d = max_abs_diff(ma, mb, n, &where);
    for (size_t i = 0; i < n; i++) {
        double e = (double)ma[i] - mb[i], u = (double)mb[i] - init[i];
        d2 += e * e;
        u2 += u * u;
        moved += fabs(e) > 1e-6;
    }
    double rel = sqrt(d2 / u2);
    printf("%s: losses", what);
    for (int s = from; s < to; s++) printf(" %.6f/%.6f", la[s], lb[s]);
    printf(" (max rel diff %.1e, tol %.0e) | updates rel L2 diff %.2e (tol %.0e), max |diff| %.2e at %zu, %zu of %zu "
           "differ by > 1e-6\n", worst, LOSS_RTOL, rel, UPDATE_RTOL, d, where, moved, n);
    EXPECT(worst <= LOSS_RTOL, "%s: losses differ by %.2e relative", what, worst);
    EXPECT(rel <= UPDATE_RTOL, "%s: the updates differ by %.3e (relative L2)", what, rel);
}
