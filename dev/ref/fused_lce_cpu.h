// fused_lce_cpu.h: the tiled online-softmax algorithm of the fully fused LM-head kernels, written as
// plain C in fp32, with the blocking (BM rows per block, BN vocab columns per tile, BK reduction depth)
// as arguments. It is the algorithm, not a fast CPU path: it lets the tiling, the masking of the last
// partial tile, the running (max, Σexp) rescaling and the bf16 rounding of the gradient be tested against
// the fp64 reference (fused_lce_ref.h, which states the semantics) at any blocking, without a GPU.
//
// Forward, per block of BM rows: walk the vocabulary in tiles of BN columns; compute the BM x BN logit
// tile in fp32 (a partial dot product per BK slice of C added to the accumulator, as an MMA k-step adds
// into its fp32 accumulator); soft-cap; fold the tile into a running max m and sum s of exp(s_j − m) per
// row (lazy: as the wgmma forward, a full tile without soft-capping is summed relative to the running m
// without its own max, which is taken only when that sum passes 2^64; llmc/head/fused_lce_sm90.cuh); pick
// up the target logit when the target falls in the tile; sum s_j for label smoothing. Only
// lse = m + log s and the row loss leave the block: the (N, V) logits never exist, nor does a row of them.
// Backward (recompute form), per (row block, vocab tile) in a fixed order: recompute the logit tile,
// form the gradient tile from lse, round it to bf16 (the GPU feeds it to bf16 tensor-core MMAs), then
// dx_block += G · W_tile and dW_tile += Gᵀ · x_block in fp32.
// Columns j >= V are masked (logit -inf, gradient 0); rows of W >= Vp and rows of x >= N read as zeros,
// like the GPU's zero-filled out-of-range loads. With BM = nb rows and BN = vb columns this is also the
// algorithm of the two-dimensional blocks (llmc/head/fused_lce_blocks.cuh), whose GEMMs take all of C at once.
#pragma once
#include <math.h>
#include <string.h>
#include "../../llmc/core/check.h"
#include "../../llmc/head/fused_lce_options.h"
#include "fused_lce_ref.h"  // bf16_round, fused_lce_ref_row_counts

// The (BM, BN) fp32 logit tile of rows r0.. and vocab columns j0.. (before any cap or mask).
static void fused_lce_cpu_logit_tile(float* tile,                      // (BM, BN)
                                     const float* x, const float* W,   // (N, C), (Vp, C)
                                     int r0, int j0, int N, int C, int Vp, int BM, int BN, int BK) {
    memset(tile, 0, (size_t)BM * BN * sizeof(float));
    for (int k0 = 0; k0 < C; k0 += BK) {
        int k1 = k0 + BK < C ? k0 + BK : C;
        for (int r = 0; r < BM && r0 + r < N; r++) {
            const float* xi = x + (size_t)(r0 + r) * C;
            for (int c = 0; c < BN && j0 + c < Vp; c++) {
                const float* wj = W + (size_t)(j0 + c) * C;
                float part = 0.0f;
                for (int k = k0; k < k1; k++) part += xi[k] * wj[k];
                tile[(size_t)r * BN + c] += part;
            }
        }
    }
}

// Forward: writes loss_rows and lse (N), the only per-row state the fused kernel keeps, and returns the
// mean loss over the valid rows (summed in row order, in fp32, as one block of the GPU does).
static float fused_lce_cpu_forward(float* loss_rows, float* lse,              // (N), (N)
                                   const float* x, const int* targets,        // (N, C), (N)
                                   const float* W,                            // (Vp, C)
                                   int N, int C, int V, int Vp, FusedLceOptions opt, int BM, int BN, int BK, int lazy) {
    float cap = opt.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f, eps = opt.label_smoothing;
    float* tile = (float*)malloc_check((size_t)BM * BN * sizeof(float));
    float* m = (float*)malloc_check((size_t)BM * sizeof(float));    // running max per row
    float* s = (float*)malloc_check((size_t)BM * sizeof(float));    // running Σ exp(s_j − m)
    float* sum = (float*)malloc_check((size_t)BM * sizeof(float));  // running Σ s_j (label smoothing)
    float* st = (float*)malloc_check((size_t)BM * sizeof(float));   // the target's capped logit
    for (int r0 = 0; r0 < N; r0 += BM) {
        for (int r = 0; r < BM; r++) { m[r] = -INFINITY; s[r] = 0.0f; sum[r] = 0.0f; st[r] = 0.0f; }
        for (int j0 = 0; j0 < V; j0 += BN) {  // every tile holds at least one column < V
            fused_lce_cpu_logit_tile(tile, x, W, r0, j0, N, C, Vp, BM, BN, BK);
            int nc = V - j0 < BN ? V - j0 : BN;  // columns >= V: -inf, i.e. left out of max and sums
            for (int r = 0; r < BM && r0 + r < N; r++) {
                float* v = tile + (size_t)r * BN;
                int t = targets[r0 + r];
                if (t >= j0 && t < j0 + nc) st[r] = cap > 0.0f ? cap * tanhf(v[t - j0] * inv_cap) : v[t - j0];
                if (lazy && nc == BN && cap == 0.0f && m[r] > -INFINITY) {
                    float ts = 0.0f, tsum = 0.0f;
                    for (int c = 0; c < nc; c++) { ts += expf(v[c] - m[r]); tsum += v[c]; }
                    if (ts <= 0x1p64f) { s[r] += ts; sum[r] += tsum; continue; }
                }
                float tile_max = -INFINITY;
                for (int c = 0; c < nc; c++) {
                    if (cap > 0.0f) v[c] = cap * tanhf(v[c] * inv_cap);
                    tile_max = fmaxf(tile_max, v[c]);
                }
                // m_new is finite (nc >= 1), so the first tile's exp(-inf − m_new) is a clean 0, not NaN
                float m_new = fmaxf(m[r], tile_max), ts = 0.0f, tsum = 0.0f;
                for (int c = 0; c < nc; c++) { ts += expf(v[c] - m_new); tsum += v[c]; }
                // the earlier tiles' terms were relative to the old max: rescale them to the new one
                s[r] = s[r] * expf(m[r] - m_new) + ts;
                m[r] = m_new;
                sum[r] += tsum;
            }
        }
        for (int r = 0; r < BM && r0 + r < N; r++) {
            int i = r0 + r;
            float l = m[r] + logf(s[r]);
            lse[i] = l;
            loss_rows[i] = fused_lce_ref_row_counts(targets[i], V, opt)
                ? l - (1.0f - eps) * st[r] - (eps / V) * sum[r] + opt.z_loss * l * l : 0.0f;
        }
    }
    free(tile); free(m); free(s); free(sum); free(st);
    int n_valid = 0;
    float total = 0.0f;
    for (int i = 0; i < N; i++) { n_valid += fused_lce_ref_row_counts(targets[i], V, opt); total += loss_rows[i]; }
    return n_valid > 0 ? total / n_valid : 0.0f;
}

// Backward, recomputing the logits from lse (the forward's output). dloss_rows == NULL: the scalar form,
// row scale dloss / N_valid; else row i's scale is dloss_rows[i]. dx is written (0 for ignored rows);
// dW is ADDED to, rows >= V untouched.
static void fused_lce_cpu_backward(float* dx, float* dW,                        // (N, C), (Vp, C)
                                   const float* lse, const float* x,            // (N), (N, C)
                                   const int* targets, const float* dloss_rows, // (N), (N) or NULL
                                   float dloss, const float* W,                 // (Vp, C)
                                   int N, int C, int V, int Vp, FusedLceOptions opt, int BM, int BN, int BK) {
    float cap = opt.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f, eps = opt.label_smoothing;
    int n_valid = 0;
    for (int i = 0; i < N; i++) n_valid += fused_lce_ref_row_counts(targets[i], V, opt);
    float* g = (float*)malloc_check((size_t)BM * BN * sizeof(float));   // logits, then the gradient, in place
    float* dxb = (float*)malloc_check((size_t)BM * C * sizeof(float));  // the block's dx accumulator
    for (int r0 = 0; r0 < N; r0 += BM) {
        int nr = N - r0 < BM ? N - r0 : BM;
        memset(dxb, 0, (size_t)BM * C * sizeof(float));
        for (int j0 = 0; j0 < V; j0 += BN) {
            fused_lce_cpu_logit_tile(g, x, W, r0, j0, N, C, Vp, BM, BN, BK);
            int nc = V - j0 < BN ? V - j0 : BN;  // columns >= V have gradient 0: left out below
            for (int r = 0; r < nr; r++) {
                int i = r0 + r, t = targets[i];
                float scale = !fused_lce_ref_row_counts(t, V, opt) ? 0.0f : dloss_rows ? dloss_rows[i] : dloss / n_valid;
                float pscale = scale * (1.0f + 2.0f * opt.z_loss * lse[i]), smooth = scale * eps / V;
                float* v = g + (size_t)r * BN;
                for (int c = 0; c < nc; c++) {
                    float sv = v[c], dsdz = 1.0f;
                    if (cap > 0.0f) { float th = tanhf(v[c] * inv_cap); sv = cap * th; dsdz = 1.0f - th * th; }
                    float d = pscale * expf(sv - lse[i]) - smooth;
                    if (j0 + c == t) d -= scale * (1.0f - eps);
                    // the tensor cores take bf16 operands: G is rounded once, here (relative error <= 2^-8)
                    v[c] = scale == 0.0f ? 0.0f : bf16_round(d * dsdz);
                }
            }
            // dx_block (BM, C) += G (BM, nc) · W_tile (nc, C)
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < nc; c++) {
                    float gv = g[(size_t)r * BN + c];
                    if (gv == 0.0f) continue;
                    const float* wj = W + (size_t)(j0 + c) * C;
                    for (int k = 0; k < C; k++) dxb[(size_t)r * C + k] += gv * wj[k];
                }
            // dW_tile (nc, C) += Gᵀ (nc, BM) · x_block (BM, C); zero columns add nothing, so ignored rows
            // and an all-ignored batch leave dW bitwise unchanged
            for (int c = 0; c < nc; c++) {
                float* dwj = dW + (size_t)(j0 + c) * C;
                for (int r = 0; r < nr; r++) {
                    float gv = g[(size_t)r * BN + c];
                    if (gv == 0.0f) continue;
                    const float* xi = x + (size_t)(r0 + r) * C;
                    for (int k = 0; k < C; k++) dwj[k] += gv * xi[k];
                }
            }
        }
        memcpy(dx + (size_t)r0 * C, dxb, (size_t)nr * C * sizeof(float));
    }
    free(g); free(dxb);
}
