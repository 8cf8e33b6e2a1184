// comm_local.cuh: a test double of the communicator (llmc/dist/comm.cuh): N ranks as N threads of one
// process, all on one GPU, each with its own stream, model and buffers. It gives the data-parallel code
// (ZeRO-1's reduce-scatter, the norm's stats, the parameter all-gather, collective checkpoints) N real
// ranks to run against without N GPUs or NCCL.
// Every collective is a rendezvous: each rank publishes its buffer, waits for its stream, and meets
// the others at a barrier; then each rank computes its own share (a sum over the ranks in rank order,
// or copies from the others' buffers) on its stream, waits for it, and meets them again, so that no
// rank changes a buffer another one still reads. Sums run in rank order, so results are deterministic
// (they differ from NCCL's ring order only in rounding). Groups are no-ops: each call completes alone.
// COMM_LOCAL_DROP_RANK=r leaves rank r out of every sum: a broken reduction, for seeing the tests fail.
//   CommLocal g;  comm_local_build(&g, N);
//   thread r:     Comm c;  comm_local(&c, &g, r);  gpt_build_dist(&m, ..., &c);  ...
#pragma once
#include <pthread.h>
#include "../../../llmc/dist/comm.cuh"

#define COMM_LOCAL_MAX 8

typedef struct {
    int world;
    pthread_barrier_t barrier;
    void* bufs[COMM_LOCAL_MAX];  // each rank's buffer in the collective under way
} CommLocal;

typedef struct { const float* p[COMM_LOCAL_MAX]; } CommLocalPtrs;

static void comm_local_build(CommLocal* g, int world) {
    if (world < 1 || world > COMM_LOCAL_MAX) check_fail("comm_local_build: world out of range", "1..COMM_LOCAL_MAX");
    memset(g, 0, sizeof(*g));
    g->world = world;
    pthread_barrier_init(&g->barrier, NULL, (unsigned)world);
}

static void comm_local_free(CommLocal* g) { pthread_barrier_destroy(&g->barrier); }

// out[i] = in[0][i] + in[1][i] + ... in rank order (out may be one of the inputs)
__global__ void comm_local_sum_kernel(float* out, CommLocalPtrs in, int world, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = in.p[0][i];
    for (int r = 1; r < world; r++) s += in.p[r][i];
    out[i] = s;
}

static void comm_local_publish(Comm* c, void* buf, cudaStream_t stream) {
    CommLocal* g = (CommLocal*)c->impl;
    g->bufs[c->rank] = buf;
    cuda_check(cudaStreamSynchronize(stream));
    pthread_barrier_wait(&g->barrier);
}

static void comm_local_done(Comm* c, cudaStream_t stream) {
    cuda_check(cudaStreamSynchronize(stream));
    pthread_barrier_wait(&((CommLocal*)c->impl)->barrier);
}

// COMM_LOCAL_DROP_RANK=r (to see the tests fail, never in normal use): the sums leave rank r out
static int comm_local_dropped_rank(void) {
    const char* e = getenv("COMM_LOCAL_DROP_RANK");
    return e && *e ? atoi(e) : -1;
}

static void comm_local_reduce_scatter(Comm* c, float* buf, size_t count, cudaStream_t stream) {
    CommLocal* g = (CommLocal*)c->impl;
    comm_local_publish(c, buf, stream);
    CommLocalPtrs in;
    int n = 0, drop = comm_local_dropped_rank();
    for (int r = 0; r < g->world; r++)
        if (r != drop) in.p[n++] = (const float*)g->bufs[r] + (size_t)c->rank * count;
    comm_local_sum_kernel<<<(unsigned)((count + 255) / 256), 256, 0, stream>>>(buf + (size_t)c->rank * count, in, n,
                                                                             count);
    cuda_check_launch();
    comm_local_done(c, stream);
}

static void comm_local_all_gather(Comm* c, void* buf, size_t bytes, cudaStream_t stream) {
    CommLocal* g = (CommLocal*)c->impl;
    comm_local_publish(c, buf, stream);
    for (int r = 0; r < g->world; r++)
        if (r != c->rank)
            cuda_check(cudaMemcpyAsync((char*)buf + r * bytes, (const char*)g->bufs[r] + r * bytes, bytes,
                                       cudaMemcpyDeviceToDevice, stream));
    comm_local_done(c, stream);
}

static void comm_local_group(Comm* c) { (void)c; }
static void comm_local_sync(Comm* c, cudaStream_t stream) { (void)c; cuda_check(cudaStreamSynchronize(stream)); }

static const CommOps COMM_LOCAL_OPS = {comm_local_reduce_scatter, comm_local_all_gather, comm_local_group,
                                       comm_local_group, comm_local_sync};

static void comm_local(Comm* c, CommLocal* g, int rank) {
    c->rank = rank;
    c->world = g->world;
    c->zero = 1;
    c->ops = &COMM_LOCAL_OPS;
    c->impl = g;
}
