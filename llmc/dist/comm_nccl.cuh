// comm_nccl.cuh: the communicator (llmc/dist/comm.cuh) over NCCL, one process per GPU. Built when the Makefile
// finds NCCL (it defines LLMC_NCCL); train_gpt says so when a multi-GPU run is asked of a build without.
// The communicator is non-blocking (NCCL's config.blocking = 0): no NCCL call can hang this process.
// Each call is followed by a wait that polls ncclCommGetAsyncError, and comm_sync polls the stream and
// the communicator together, so a peer that stops answering (a hang, not a crash: crashes reach every
// rank at once through llmc/dist/dist_control.h) ends the run after timeout_s with ncclCommAbort and a
// message, never a silent hang.
// Reduce-scatter and all-gather are NCCL's in-place forms: rank r's part is buf + r·count.
#pragma once
#ifdef LLMC_NCCL
#include <nccl.h>
#include <unistd.h>
#include "comm.cuh"
#include "dist_socket.h"  // dist_now

typedef struct {
    ncclComm_t comm;
    double timeout_s;  // the longest a collective may make no progress
} CommNccl;

// The run cannot go on: abort the communicator (no NCCL kernel waits on peers any longer) and exit 1 with
// the message. The other ranks learn of it through the control channel (llmc/dist/dist_control.h).
static inline void comm_nccl_fail(CommNccl* n, const char* what, ncclResult_t r) {
    char last[512];  // NCCL's own text, read before the abort frees the communicator
    snprintf(last, sizeof(last), "%s", ncclGetLastError(n->comm));
    ncclCommAbort(n->comm);
    check_failf("the messages of the other ranks say which one failed first; NCCL_DEBUG=WARN shows NCCL's own account",
                "NCCL: %s: %s (%s)", what, ncclGetErrorString(r), last);
}

// After a call on the non-blocking communicator: wait while it is still in progress.
static inline void comm_nccl_wait(CommNccl* n, ncclResult_t r, const char* what) {
    double t0 = dist_now();
    while (r == ncclInProgress) {
        if (dist_now() - t0 > n->timeout_s) comm_nccl_fail(n, what, ncclInProgress);
        usleep(50);
        if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) comm_nccl_fail(n, what, r);
}

static void comm_nccl_reduce_scatter(Comm* c, float* buf, size_t count, cudaStream_t stream) {
    CommNccl* n = (CommNccl*)c->impl;
    comm_nccl_wait(n, ncclReduceScatter(buf, buf + (size_t)c->rank * count, count, ncclFloat32, ncclSum, n->comm, stream),
                   "reduce-scatter of the gradients");
}

static void comm_nccl_all_gather(Comm* c, void* buf, size_t bytes, cudaStream_t stream) {
    CommNccl* n = (CommNccl*)c->impl;
    comm_nccl_wait(n, ncclAllGather((char*)buf + (size_t)c->rank * bytes, buf, bytes, ncclUint8, n->comm, stream),
                   "all-gather");
}

static void comm_nccl_group_start(Comm* c) {
    CommNccl* n = (CommNccl*)c->impl;
    comm_nccl_wait(n, ncclGroupStart(), "group start");
}

static void comm_nccl_group_end(Comm* c) {
    CommNccl* n = (CommNccl*)c->impl;
    comm_nccl_wait(n, ncclGroupEnd(), "group of collectives");
}

// Waits for stream while watching the communicator: an asynchronous NCCL error, or no completion within
// timeout_s, aborts the run.
static void comm_nccl_sync(Comm* c, cudaStream_t stream) {
    CommNccl* n = (CommNccl*)c->impl;
    double t0 = dist_now();
    for (;;) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) cuda_check(q);
        ncclResult_t r;
        if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess || (r != ncclSuccess && r != ncclInProgress))
            comm_nccl_fail(n, "a collective failed", r);
        if (dist_now() - t0 > n->timeout_s) {
            char what[160];
            snprintf(what, sizeof(what), "no progress in %.0f s (-nccl_timeout): a rank stopped answering", n->timeout_s);
            comm_nccl_fail(n, what, ncclInProgress);
        }
        usleep(100);
    }
}

static const CommOps COMM_NCCL_OPS = {comm_nccl_reduce_scatter, comm_nccl_all_gather, comm_nccl_group_start,
                                      comm_nccl_group_end, comm_nccl_sync};

// Joins the communicator of `world` ranks named by id (rank 0 made it with ncclGetUniqueId and every rank
// received it through the rendezvous). The current CUDA device is this rank's GPU.
static inline void comm_nccl_init(Comm* c, CommNccl* n, const ncclUniqueId* id, int rank, int world, double timeout_s) {
    n->timeout_s = timeout_s;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, world, *id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
        check_failf("check that every process sees the same world size and that the GPUs can reach each other "
                    "(NCCL_DEBUG=INFO tells more)", "NCCL: rank %d of %d could not join the communicator: %s", rank,
                    world, ncclGetErrorString(r));
    if (r == ncclInProgress) ncclCommGetAsyncError(n->comm, &r);
    comm_nccl_wait(n, r, "joining the communicator");
    c->rank = rank;
    c->world = world;
    c->zero = 1;
    c->ops = &COMM_NCCL_OPS;
    c->impl = n;
}

// For the control channel's watcher thread (llmc/dist/dist_control.h): another rank failed.
static void comm_nccl_abort(void* n) { ncclCommAbort(((CommNccl*)n)->comm); }

static inline void comm_nccl_free(CommNccl* n) {
    ncclResult_t r = ncclCommFinalize(n->comm);
    if (r == ncclInProgress) ncclCommGetAsyncError(n->comm, &r);
    comm_nccl_wait(n, r, "finalizing the communicator");
    ncclCommDestroy(n->comm);
}
#endif  // LLMC_NCCL
