// comm.cuh: the collectives of data-parallel training behind one small interface, so that the model's
// code is the same on one GPU, across processes through NCCL (comm_nccl.cuh), and in the test double
// that runs several ranks as threads of one process on one GPU (dev/test/dist/comm_local.cuh).
// Both collectives work in place on a buffer of `world` equal parts, part r belonging to rank r:
//   reduce_scatter: part r of rank r becomes the sum over ranks of their part r (fp32); the other parts
//                   are left as they are or undefined (NCCL may use them).
//   all_gather:     part r of every rank becomes rank r's part r (any type: parts counted in bytes).
// group_start ... group_end lets several collectives go as one launch (NCCL's group calls). Every
// collective is enqueued on the stream it is given, in the same order on every rank. sync waits for a
// stream and checks the backend's health (NCCL: asynchronous errors and a timeout, so that a rank
// that stopped answering ends the run instead of hanging it).
// World 1 needs no backend: ops is NULL and every call returns at once (the one part is the buffer).
#pragma once
#include "../core/cuda_common.cuh"

typedef struct Comm Comm;

typedef struct {
    void (*reduce_scatter)(Comm* c, float* buf, size_t count, cudaStream_t stream);  // count: elements of one part
    void (*all_gather)(Comm* c, void* buf, size_t bytes, cudaStream_t stream);       // bytes: of one part
    void (*group_start)(Comm* c);
    void (*group_end)(Comm* c);
    void (*sync)(Comm* c, cudaStream_t stream);
} CommOps;

struct Comm {
    int rank, world;
    int zero;            // 1: the models shard their optimizer state over the ranks (ZeRO-1, llmc/optim/zero.cuh,
                         // the default); 0: every rank keeps all of it (-zero 0)
    const CommOps* ops;  // NULL: world 1
    void* impl;          // the backend's state
};

static inline void comm_single(Comm* c) {
    c->rank = 0;
    c->world = 1;
    c->zero = 1;
    c->ops = NULL;
    c->impl = NULL;
}

static inline int comm_active(const Comm* c) { return c && c->ops && c->world > 1; }

// buf: (world·count) fp32, rank r's part at buf + r·count
static inline void comm_reduce_scatter(Comm* c, float* buf, size_t count, cudaStream_t stream) {
    if (comm_active(c)) c->ops->reduce_scatter(c, buf, count, stream);
}
// buf: (world·bytes), rank r's part at buf + r·bytes
static inline void comm_all_gather(Comm* c, void* buf, size_t bytes, cudaStream_t stream) {
    if (comm_active(c)) c->ops->all_gather(c, buf, bytes, stream);
}
static inline void comm_group_start(Comm* c) {
    if (comm_active(c)) c->ops->group_start(c);
}
static inline void comm_group_end(Comm* c) {
    if (comm_active(c)) c->ops->group_end(c);
}
// Waits for stream: through the backend when there is one (its failure checks), else plainly.
static inline void comm_sync(Comm* c, cudaStream_t stream) {
    if (comm_active(c)) c->ops->sync(c, stream);
    else cuda_check(cudaStreamSynchronize(stream));
}

// Every rank's n host floats: mine (n) in, all (world·n) out in rank order; dev is (world·n) device
// scratch. Synchronous (for once-a-run or once-an-eval values, not inside the step).
static inline void comm_gather_host(Comm* c, const float* mine, int n, float* all, float* dev, cudaStream_t stream) {
    int rank = c ? c->rank : 0, world = c ? c->world : 1;
    cuda_check(cudaMemcpyAsync(dev + (size_t)rank * n, mine, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    comm_all_gather(c, dev, n * sizeof(float), stream);
    cuda_check(cudaMemcpyAsync(all, dev, (size_t)world * n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    comm_sync(c, stream);
}
