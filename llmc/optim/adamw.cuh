// adamw.cuh: the AdamW update (PyTorch's formulation, decoupled weight decay) of this rank's parts of
// the parameters (a ZeRO plan, llmc/optim/zero.cuh; with world 1 the parts are every parameter):
//   g = grad · clip_scale;  m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²
//   master −= lr · ( (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε) + wd · master );   param = bf16(master)
// Everything is fp32 (gradient, moments, master weights). The master weights are stored split
// (llmc/optim/master_split.h): the bf16 parameter the model computes with is their high half, rounded to
// nearest (ties away from zero), and lo their int16 remainder; the kernel joins the two into the exact
// fp32 master, updates it and splits it again. m, v and lo are the shard (the parts in plan order);
// gradient and parameters are the whole flat arrays. Fused: the gradient-clipping scale is read from
// device memory (llmc/optim/global_norm.cuh computed it), so the step needs no host round trip between the
// norm and the update. Weight decay applies to the parts whose slice asks for it (the model's 2-D
// weight matrices). A skip flag on the device (global_norm.cuh sets it when the norm or the loss is not
// finite) makes the whole update a no-op: weights and moments stay as they were. Elementwise, so a
// rank's parts get bitwise the update the unsharded step gives them.
// Napkin math: 28 bytes moved per parameter (read gradient, m, v, parameter, lo; write m, v, parameter,
// lo; 30 with a separate fp32 master), 3.5 GB for 124M: ~0.75 ms at the H200's 4.8 TB/s (divided by world).
#pragma once
#include "../core/cuda_common.cuh"
#include "zero.cuh"
#include "master_split.h"

// --- kernels ---------------------------------------------------------------------------------

// A thread's elements in groups of ADAMW_GROUP (zero_for_each_group): a group's five loads each are issued
// before its arithmetic and stores, instead of one element's at a time. The pass is bound by memory: one
// element at a time it already moves its bytes near a device-to-device copy's rate (3.7-4.0 TB/s on an
// H200, doc/results.md), so the grouping can gain only a few percent. A build with -DADAMW_GROUP=1 runs
// the pass one element at a time, for comparing the two.
#ifndef ADAMW_GROUP
#define ADAMW_GROUP 4
#endif

__global__ void adamw_kernel(bf16* param, int16_t* lo, float* m, float* v, const float* grad, const ZeroPart* parts,
                             int n_parts, const float* clip_scale, const float* skip, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2) {
    if (skip && *skip != 0.0f) return;
    float scale = clip_scale ? *clip_scale : 1.0f;
    zero_for_each_group<ADAMW_GROUP>(parts, n_parts, [&](size_t j, size_t s, const ZeroPart& p, int count) {
        float gs[ADAMW_GROUP], ms[ADAMW_GROUP], vs[ADAMW_GROUP];
        uint16_t his[ADAMW_GROUP];
        int16_t los[ADAMW_GROUP];
        #pragma unroll
        for (int g = 0; g < ADAMW_GROUP; g++) {
            if (g >= count) break;
            size_t jg = j + (size_t)g * ZERO_THREADS, sg = s + (size_t)g * ZERO_THREADS;
            gs[g] = grad[jg];
            ms[g] = m[sg];
            vs[g] = v[sg];
            his[g] = __bfloat16_as_ushort(param[jg]);
            los[g] = lo[sg];
        }
        float decay = p.decay ? wd : 0.0f;
        #pragma unroll
        for (int g = 0; g < ADAMW_GROUP; g++) {
            if (g >= count) break;
            size_t jg = j + (size_t)g * ZERO_THREADS, sg = s + (size_t)g * ZERO_THREADS;
            float gr = gs[g] * scale;
            float mi = beta1 * ms[g] + (1.0f - beta1) * gr;
            float vi = beta2 * vs[g] + (1.0f - beta2) * gr * gr;
            float w = master_join(his[g], los[g]);
            w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + decay * w);
            m[sg] = mi;
            v[sg] = vi;
            uint16_t hi;
            master_split(w, &hi, &lo[sg]);
            param[jg] = __ushort_as_bfloat16(hi);
        }
    });
}

// One step t = 1, 2, ... on this rank's parts of plan z: param (num_params) bf16 and grad (num_params)
// fp32, whole; lo (shard_size) int16, m and v (shard_size) fp32, the shard; clip_scale (1,) fp32 on the
// device, or NULL for 1; skip (1,) fp32 on the device, non-zero: change nothing (NULL: never skip); wd
// for the parts whose slice decays.
static inline void adamw_update(bf16* param, int16_t* lo, float* m, float* v, const float* grad, const ZeroPlan* z,
                                const float* clip_scale, const float* skip, float lr, float beta1, float beta2,
                                float eps, float wd, int t, const GpuContext* ctx) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<z->blocks, ZERO_THREADS, 0, ctx->stream>>>(param, lo, m, v, grad, z->parts, z->n_slices,
                                                              clip_scale, skip, lr, beta1, beta2, eps, wd, bc1, bc2);
    cuda_check_launch();
    profile_mark(ctx->prof, "adamw", ctx->stream);
}
