// adamw.cuh: the AdamW update (PyTorch's formulation, decoupled weight decay) of this rank's parts of
// the parameters (a ZeRO plan, llmc/zero.cuh; with world 1 the parts are every parameter):
//   g = grad · clip_scale;  m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²
//   master −= lr · ( (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε) + wd · master );   param = bf16(master)
// Everything is fp32 (gradient, moments, master weights); the bf16 parameter the model computes with
// is written from the master copy with round-to-nearest (deterministic). Master, m and v are the shard
// (the parts in plan order); gradient and parameters are the whole flat arrays. Fused: the
// gradient-clipping scale is read from device memory (llmc/global_norm.cuh computed it), so the step
// needs no host round trip between the norm and the update. Weight decay applies to the parts whose
// slice asks for it (the model's 2-D weight matrices). A skip flag on the device (global_norm.cuh sets
// it when the norm or the loss is not finite) makes the whole update a no-op: weights and moments stay
// as they were. Elementwise, so a rank's parts get bitwise the update the unsharded step gives them.
// Napkin math: 26 bytes moved per parameter, ~3 ms for 124M on an H200 (divided by world).
#pragma once
#include "cuda_common.cuh"
#include "zero.cuh"

// --- kernels ---------------------------------------------------------------------------------

__global__ void adamw_kernel(bf16* param, float* master, float* m, float* v, const float* grad, const ZeroPart* parts,
                             int n_parts, const float* clip_scale, const float* skip, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2) {
    if (skip && *skip != 0.0f) return;
    const ZeroPart p = parts[zero_part_of_block(parts, n_parts, blockIdx.x)];
    float scale = clip_scale ? *clip_scale : 1.0f, decay = p.decay ? wd : 0.0f;
    size_t base = (size_t)(blockIdx.x - p.first_block) * ZERO_BLOCK_ELEMS;
    for (int k = 0; k < ZERO_PER_THREAD; k++) {
        size_t i = base + (size_t)k * ZERO_THREADS + threadIdx.x;
        if (i >= p.n) break;
        size_t j = p.param + i, s = p.shard + i;
        float g = grad[j] * scale;
        float mi = beta1 * m[s] + (1.0f - beta1) * g;
        float vi = beta2 * v[s] + (1.0f - beta2) * g * g;
        float w = master[s];
        w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + decay * w);
        m[s] = mi;
        v[s] = vi;
        master[s] = w;
        param[j] = __float2bfloat16(w);
    }
}

// param[i] = bf16(master[i]): after init or a checkpoint load.
__global__ void adamw_copy_master_kernel(bf16* param, const float* master, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) param[i] = __float2bfloat16(master[i]);
}

// One step t = 1, 2, ... on this rank's parts of plan z: param (num_params) bf16 and grad (num_params)
// fp32, whole; master, m, v (shard_size) fp32, the shard; clip_scale (1,) fp32 on the device, or NULL
// for 1; skip (1,) fp32 on the device, non-zero: change nothing (NULL: never skip); wd for the parts
// whose slice decays.
static inline void adamw_update(bf16* param, float* master, float* m, float* v, const float* grad, const ZeroPlan* z,
                                const float* clip_scale, const float* skip, float lr, float beta1, float beta2,
                                float eps, float wd, int t, const GpuContext* ctx) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<z->blocks, ZERO_THREADS, 0, ctx->stream>>>(param, master, m, v, grad, z->parts, z->n_slices,
                                                              clip_scale, skip, lr, beta1, beta2, eps, wd, bc1, bc2);
    cuda_check_launch();
    profile_mark(ctx->prof, "adamw", ctx->stream);
}

static inline void adamw_copy_master(bf16* param, const float* master, size_t n, cudaStream_t stream) {
    adamw_copy_master_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(param, master, n);
    cuda_check_launch();
}
