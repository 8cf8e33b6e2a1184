// master.cuh: the fp32 master weights of a ZeRO plan (llmc/optim/zero.cuh), kept split (llmc/optim/master_split.h):
// the bf16 parameters, whole on every rank, hold their high halves, and each rank keeps the int16
// remainders of its own parts (num_params of them with world 1). So the master is 2 bytes a parameter
// beyond the bf16 copy, not 4, and exact. AdamW (llmc/optim/adamw.cuh) joins and splits them elementwise; here
// is what readers and writers outside the step need: set them from whole fp32 values (the init, a
// checkpoint, an import), and gather them whole as fp32 (a checkpoint, an export, the tests).
#pragma once
#include "../core/cuda_common.cuh"
#include "zero.cuh"
#include "master_split.h"

// --- kernels ---------------------------------------------------------------------------------

// param[i] = the bf16 high half of full[i], every i < n
__global__ void master_params_kernel(bf16* param, const float* full, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint16_t hi;
    int16_t lo;
    master_split(full[i], &hi, &lo);
    param[i] = __ushort_as_bfloat16(hi);
}

// This rank's parts: to_full 0: lo[part] = the remainders of full[part]; 1: full[part] = master_join
// (param[part], lo[part]). The shard kernels' grid (zero_for_each_elem).
__global__ void master_parts_kernel(float* full, const bf16* param, int16_t* lo, const ZeroPart* parts, int n,
                                    int to_full) {
    zero_for_each_elem(parts, n, [&](size_t j, size_t s, const ZeroPart&) {
        if (to_full) {
            full[j] = master_join(__bfloat16_as_ushort(param[j]), lo[s]);
        } else {
            uint16_t h;
            master_split(full[j], &h, &lo[s]);
        }
    });
}

// --- launchers -------------------------------------------------------------------------------

// The master weights = full (num_params fp32, device, the same on every rank): params (num_params) get
// every high half, lo (z->shard_size) this rank's remainders.
static inline void master_set(bf16* params, int16_t* lo, const float* full, const ZeroPlan* z, cudaStream_t stream) {
    size_t n = z->num_params;
    master_params_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(params, full, n);
    cuda_check_launch();
    master_parts_kernel<<<z->blocks, ZERO_THREADS, 0, stream>>>((float*)full, params, lo, z->parts, z->n_slices, 0);
    cuda_check_launch();
}

// The whole fp32 master weights into full (num_params, device: scratch, the gradient buffer outside the
// step), joined from params and each rank's remainders lo (z->shard_size), then all-gathered when the
// state is sharded. Collective: every rank calls it. Returns full.
static inline const float* master_gather(const ZeroPlan* z, Comm* comm, float* full, const bf16* params,
                                         const int16_t* lo, cudaStream_t stream) {
    master_parts_kernel<<<z->blocks, ZERO_THREADS, 0, stream>>>(full, params, (int16_t*)lo, z->parts, z->n_slices, 1);
    cuda_check_launch();
    if (z->shards > 1) zero_all_gather_parts(z, comm, full, sizeof(float), -2, stream);
    return full;
}
