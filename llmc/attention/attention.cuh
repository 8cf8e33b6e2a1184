// attention.cuh: the model's causal self-attention layer, forward and backward, multi-head (GPT-2) or
// grouped-query (NKV key/value heads shared by the NH query heads, NH % NKV == 0; Llama-style):
//   qkv (B, T, C + 2·NKV·hs) bf16, hs = C/NH: query head h at channel h·hs, key head j at C + j·hs,
//        value head j at C + (NKV + j)·hs; query head h reads kv head j = h / (NH / NKV). GPT-2 passes
//        NKV = NH: qkv (B, T, 3C), head h's q, k, v at h·hs, C + h·hs, 2C + h·hs.
//   out (B, T, C) bf16:  out[b, t, h·hs + d] = Σ_{t2 ≤ t} softmax_t2(q·k[t2] / √hs) · v[t2, d]
// Picks the kernels by head size and GPU: flash attention on the tensor cores for hs = 64 and 128, with
// wgmma and TMA on an sm_90 GPU in an sm_90a build (flash_attention_sm90{,_backward}.cuh), with mma.sync elsewhere
// (flash_attention.cuh, flash_attention_backward.cuh); the simple exact kernels for any other head size
// (attention_simple.cuh: T <= 1024). All save only lse (B, NH, T) fp32 for the backward; none ever holds
// the (B, NH, T, T) scores. All are deterministic (no atomics): the backward sums a kv head's gradient
// over its query heads in a fixed order.
// rope: RoPE's cos/sin table (llmc/layers/rope.cuh) for Llama-style models, or NULL (GPT-2). The forward then
// rotates q and k in place (qkv afterwards holds them rotated, as the backward needs), and the
// backward's dq and dk are with respect to the unrotated q and k. With the flash kernels RoPE's backward
// is fused, and its forward partly (llmc/layers/rope.cuh says how); with the simple ones it is a pass over q and
// k on each side.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/column_sums.cuh"
#include "attention_simple.cuh"
#include "../layers/rope.cuh"
#include "flash_attention.cuh"
#include "flash_attention_backward.cuh"
#include "flash_attention_sm90_backward.cuh"  // and the forward

// --- launchers -------------------------------------------------------------------------------

static inline int attention_uses_flash(int C, int NH) { return C / NH == 64 || C / NH == 128; }

// Floats of scratch attention_backward needs for dbias, with W = C + 2·NKV·C/NH the width of qkv: the
// Hopper kernels' partial rows (B · ceil(T/128)), or the bias kernel's (COLUMN_SUMS_CHUNKS).
static inline size_t attention_bias_scratch(int B, int T, int W) {
    size_t rows = (size_t)B * ceil_div(T, FA90_BQ);
    return (rows > COLUMN_SUMS_CHUNKS ? rows : COLUMN_SUMS_CHUNKS) * (size_t)W;
}

// out (B, T, C) bf16, lse (B, NH, T) fp32 from qkv (B, T, C + 2·NKV·C/NH) bf16; with rope, q and k are
// first rotated in place.
static inline void attention_forward(bf16* out, float* lse, bf16* qkv, const float* rope, int B, int T, int C,
                                     int NH, int NKV, const GpuContext* ctx) {
    if (attention_uses_flash(C, NH) && flash_sm90_available()) {
        if (rope) rope_forward(qkv, rope, B, T, NH, NKV, C / NH, ctx);
        flash_sm90_forward(out, lse, qkv, B, T, C, NH, NKV, ctx->stream);
    } else if (attention_uses_flash(C, NH)) {
        flash_attention_forward(out, lse, qkv, rope, B, T, C, NH, NKV, ctx->stream);
    } else {
        if (rope) rope_forward(qkv, rope, B, T, NH, NKV, C / NH, ctx);
        attention_simple_forward(out, lse, qkv, B, T, C, NH, NKV, ctx->stream);
    }
    profile_mark(ctx->prof, "attention forward", ctx->stream);
}

// dqkv (B, T, C + 2·NKV·C/NH) bf16 assigned (qkv's layout), from dout (B, T, C) bf16 and the forward's
// out, qkv (as the forward left it), rope and lse; D_scratch (B, NH, T) fp32. With rope, dq and dk are
// with respect to the unrotated q and k (what the QKV GEMM wrote). Unless dbias is NULL, dbias
// (C + 2·NKV·C/NH,) fp32 += the column sums of dqkv as written (the QKV layer's bias gradient), through
// scratch (attention_bias_scratch floats): in the Hopper kernels' epilogues (without rope), else by the
// bias kernel.
static inline void attention_backward(bf16* dqkv, float* D_scratch, const bf16* dout, const bf16* out,
                                      const bf16* qkv, const float* rope, const float* lse, float* dbias,
                                      float* scratch, int B, int T, int C, int NH, int NKV, const GpuContext* ctx) {
    int W = C + 2 * NKV * (C / NH);
    if (dbias && !scratch)
        check_fail("attention_backward: dbias given without scratch", "pass attention_bias_scratch(B, T, W) floats");
    int summed = 0;  // dbias added to by the Hopper kernels' epilogues
    if (attention_uses_flash(C, NH) && flash_sm90_available()) {
        summed = dbias && !rope;  // not in a rotated layer: those kernels have no sums (no model here has both)
        flash_sm90_backward(dqkv, D_scratch, dout, out, qkv, rope, lse, summed ? scratch : NULL, B, T, C, NH, NKV,
                            ctx->stream);
        if (summed) {
            ColumnSumsOut to = {{dbias, NULL, NULL}};
            column_sums_finish(to, scratch, B * ceil_div(T, FA90_BQ), W, 1, ctx->stream);
        }
    } else if (attention_uses_flash(C, NH)) {
        flash_attention_backward(dqkv, D_scratch, dout, out, qkv, rope, lse, B, T, C, NH, NKV, ctx->stream);
    } else {
        attention_simple_backward(dqkv, D_scratch, dout, qkv, lse, B, T, C, NH, NKV, ctx->stream);
        if (rope) rope_backward(dqkv, rope, B, T, NH, NKV, C / NH, ctx);
    }
    if (dbias && !summed) column_sums_bf16(dbias, dqkv, B * T, W, scratch, ctx->stream);
    profile_mark(ctx->prof, "attention backward", ctx->stream);
}
