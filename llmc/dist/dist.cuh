// dist.cuh: this process's place in a data-parallel run, from start to end. It ties together the
// launch environment (llmc/dist/dist_env.h: torchrun-style variables, Open MPI, PMI, Slurm), the rendezvous
// and control channel (llmc/dist/dist_control.h: the NCCL id from rank 0, and failures that reach every rank)
// and the NCCL communicator (llmc/dist/comm_nccl.cuh) into one Comm for the model.
//   DistRun d;
//   dist_detect(&d, 600.0);            // world 1 when nothing launched us
//   dist_join(&d, "tcp");              // after the flags are valid
//   ... data, gpu_context_build(&ctx, dist_device(&d, -device)) ...
//   dist_connect(&d, 1);               // the NCCL communicator (after the CUDA device is set); 1: ZeRO-1
//   gpt_build_dist(&model, ..., dist_comm(&d));
//   ...
//   dist_leave(&d);
// Not launched (no launcher variables): world 1, no sockets, no NCCL, dist_comm is NULL and the model
// runs the single-GPU code. Launched, even with WORLD_SIZE=1: the NCCL path, which must give bitwise the
// results of the single-GPU one (dev/test/dist/test_train_dist_gpu.sh checks it).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include "../core/cuda_common.cuh"
#include "comm.cuh"
#include "comm_nccl.cuh"
#include "dist_env.h"
#include "dist_control.h"

typedef struct {
    DistEnv env;
    int launched;        // a launcher set our rank: the NCCL path
    DistControl ctl;
    Comm comm;
    double timeout_s;    // -nccl_timeout
#ifdef LLMC_NCCL
    ncclUniqueId nccl_id;  // made by rank 0, received by every rank in dist_join
    CommNccl nccl;
#endif
} DistRun;

static inline int dist_rank(const DistRun* d) { return d->env.rank; }
static inline int dist_world(const DistRun* d) { return d->env.world_size; }
static inline Comm* dist_comm(DistRun* d) { return d->launched ? &d->comm : NULL; }

// Reads the launch environment (exits with a message naming the variable when it is inconsistent):
// d->launched says whether a launcher started this process.
static inline void dist_detect(DistRun* d, double timeout_s) {
    memset(d, 0, sizeof(*d));
    d->timeout_s = timeout_s;
    char err[DIST_ERR_LEN];
    if (dist_env_detect(&d->env, err, sizeof(err)) != 0)
        check_failf("doc/multi_gpu.md (Running) lists the variables a launcher sets; unset them to run one process",
                    "%s", err);
    d->launched = strcmp(d->env.source, "none") != 0;
}

// When launched: meets the other ranks (init: "tcp" or "file:PATH"), takes the NCCL id from rank 0,
// makes a failure on any rank reach all of them, and leaves stdout to rank 0. Exits with a message when
// the rendezvous does not complete within the timeout.
static inline void dist_join(DistRun* d, const char* init) {
    if (!d->launched) return;
#ifndef LLMC_NCCL
    (void)init;
    check_failf("make train_gpt prints where it looks for NCCL; set NCCL_HOME to an NCCL install and rebuild",
                "launched as rank %d of %d (%s), but this train_gpt was built without NCCL", d->env.rank,
                d->env.world_size, d->env.source);
#else
    char err[DIST_ERR_LEN];
    if (dist_control_open(&d->ctl, &d->env, init, d->timeout_s, err, sizeof(err)) != 0)
        check_failf("every rank must start with the same world size and -nccl_init and reach rank 0 within the "
                    "timeout (doc/multi_gpu.md, Running)", "rank %d of %d: %s", d->env.rank, d->env.world_size, err);
    memset(&d->nccl_id, 0, sizeof(d->nccl_id));
    ncclResult_t r = d->env.rank == 0 ? ncclGetUniqueId(&d->nccl_id) : ncclSuccess;
    if (r != ncclSuccess)  // rank 0 sends no id: the broadcast fails on every rank, naming it
        check_failf("NCCL_DEBUG=INFO tells more", "NCCL: ncclGetUniqueId: %s", ncclGetErrorString(r));
    if (dist_control_broadcast(&d->ctl, &d->nccl_id, sizeof(d->nccl_id), err, sizeof(err)) != 0)
        check_failf("the other ranks' messages say which one failed first (doc/multi_gpu.md, Failures)", "rank %d: %s",
                    d->env.rank, err);
    // no ncclCommAbort from the watcher's thread (NCCL calls on one communicator from two threads are
    // not safe): the process exits, and with it the CUDA context and its kernels
    dist_control_watch(&d->ctl, NULL, NULL);
    dist_control_report_failures(&d->ctl);
    if (d->env.rank != 0 && !freopen("/dev/null", "w", stdout))  // only rank 0 logs
        check_failf("the ranks other than 0 write their stdout to /dev/null: check that it exists and is writable",
                    "/dev/null: %s", strerror(errno));
#endif
}

// The CUDA device of this rank: `requested` (-device) alone, else the local rank among the visible GPUs.
static inline int dist_device(const DistRun* d, int requested) {
    if (!d->launched) return requested;
    int count = 0;
    cuda_check(cudaGetDeviceCount(&count));
    return d->env.local_rank % (count > 0 ? count : 1);
}

// The NCCL communicator of the run, from the id dist_join received. The CUDA device must be set
// (gpu_context_build). zero: 1, the models shard their optimizer state over the ranks (ZeRO-1); 0, every
// rank keeps all of it (Comm.zero).
static inline void dist_connect(DistRun* d, int zero) {
    if (!d->launched) return;
#ifdef LLMC_NCCL
    comm_nccl_init(&d->comm, &d->nccl, &d->nccl_id, d->env.rank, d->env.world_size, d->timeout_s);
    d->comm.zero = zero;
#endif
}

// The end of a run that went well: the communicator, then the control channel (a goodbye from every
// rank, so that none of them takes the others' exit for a failure).
static inline void dist_leave(DistRun* d) {
    if (!d->launched) return;
#ifdef LLMC_NCCL
    comm_nccl_free(&d->nccl);
#endif
    char err[DIST_ERR_LEN];
    if (dist_control_close(&d->ctl, d->timeout_s, err, sizeof(err)) != 0)
        check_failf("the other ranks' messages say which one failed first (doc/multi_gpu.md, Failures)", "rank %d: %s",
                    d->env.rank, err);
}
