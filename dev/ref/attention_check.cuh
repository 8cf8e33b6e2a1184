// attention_check.cuh: checks one causal-attention implementation (forward out and lse, backward
// dq, dk, dv) against the CPU fp64 reference (dev/ref/ref_layers.h) on random bf16 inputs: multi-head
// attention (NKV == NH, GPT-2's qkv) and grouped-query attention (NKV < NH: qkv (B, T, (NH + 2·NKV)·hs)),
// one reference function for both; with RoPE (att_check_rope) the reference rotates q and k first and
// the gradients back last, as the CPU model does. Shared by dev/cuda/attention.cu (every variant) and
// dev/test/attention/test_attention{,_gqa}.cu. Outputs are poisoned (0xFF bytes: bf16/fp32 NaN) before each
// run, so unwritten elements show up as non-finite; errors are relative L2 (‖x − ref‖ / ‖ref‖) and max
// abs with its location.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#define REF_DOUBLE
#include "ref_layers.h"
#include "../../llmc/core/cuda_common.cuh"

// One implementation under test: self carries any scratch it needs. C = NH·hs; qkv is (B, T, C + 2·NKV·hs),
// which a forward with RoPE rotates in place (its q and k heads), as the model's does.
typedef void (*AttFwdFn)(void* self, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                         cudaStream_t st);
typedef void (*AttBwdFn)(void* self, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                         const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t st);

typedef struct { double rel_l2, max_abs; size_t where, nonfinite; } AttErr;
// hash: FNV-1a of the bytes computed (out, lse, then dqkv), printed so that two builds of a kernel can be
// compared bit for bit on the same inputs (a refactor that must not change a bit).
typedef struct { AttErr out, lse, dq, dk, dv; int bitwise_repeatable, rope; uint64_t hash; } AttCheck;

static inline uint64_t att_fnv1a(uint64_t h, const void* p, size_t n) {
    const unsigned char* c = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

__host__ __device__ static inline float att_hash_uniform(uint64_t seed, uint64_t i) {  // in [-1, 1)
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Compares n values of a (bf16 or fp32 host copy, read through get) with ref, over elements with
// lo ≤ i % period < hi (period = 0: all): picks the q, k or v part of dqkv's rows.
template <typename G>
static AttErr att_compare(G get, const double* ref, size_t n, size_t period, size_t lo, size_t hi) {
    AttErr e = {0, 0, 0, 0};
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (period && (i % period < lo || i % period >= hi)) continue;
        double x = get(i), d = fabs(x - ref[i]);
        if (!isfinite(x)) { if (!e.nonfinite) e.where = i; e.nonfinite++; continue; }
        num += d * d;
        den += ref[i] * ref[i];
        if (d > e.max_abs) { e.max_abs = d; if (!e.nonfinite) e.where = i; }
    }
    e.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    return e;
}

static inline void att_print_err(const char* what, AttErr e) {
    printf("    %-4s rel L2 %.2e  max abs %.2e at %zu%s", what, e.rel_l2, e.max_abs, e.where,
           e.nonfinite ? "" : "\n");
    if (e.nonfinite) printf("  NON-FINITE: %zu elements (first at %zu)\n", e.nonfinite, e.where);
}

static inline int att_err_ok(AttErr e, double tol) { return e.nonfinite == 0 && e.rel_l2 <= tol; }

// Random bf16 inputs: qkv (B, T, (NH + 2·NKV)·hs) with q, k ~ U(-2, 2) (scores with std ~1.3, softmax
// rows neither flat nor one-hot) and v ~ U(-1, 1); dout (B, T, NH·hs) ~ U(-1, 1).
static void att_inputs(bf16* qkv, bf16* dout, int B, int T, int NH, int NKV, int hs, uint64_t seed) {
    size_t W = (size_t)(NH + 2 * NKV) * hs, nqkv = (size_t)B * T * W, nout = (size_t)B * T * NH * hs;
    for (size_t i = 0; i < nqkv; i++)
        qkv[i] = __float2bfloat16((i % W < (size_t)(NH + NKV) * hs ? 2.0f : 1.0f) * att_hash_uniform(seed, i));
    for (size_t i = 0; i < nout; i++) dout[i] = __float2bfloat16(att_hash_uniform(seed + 1, i));
}

// What one implementation computed, copied to the host: the forward's out and lse, and (with a
// backward) dqkv of the first of two backward runs, and whether the two are bitwise equal.
typedef struct { bf16* out; float* lse; bf16* dqkv; int bitwise_repeatable; } AttRun;

static void att_run_free(AttRun* r) { free(r->out); free(r->lse); free(r->dqkv); }

// Runs fwd, then bwd twice when given, on the host inputs; outputs poisoned before each run.
static AttRun att_run(AttFwdFn fwd, AttBwdFn bwd, void* self, const bf16* h_qkv, const bf16* h_dout, int B, int T,
                      int NH, int NKV, int hs, cudaStream_t st) {
    int C = NH * hs;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hs, nout = (size_t)B * T * C, nrow = (size_t)B * NH * T;
    bf16 *d_qkv, *d_dout, *d_out, *d_dqkv;
    float *d_lse, *d_D;
    cuda_check(cudaMalloc(&d_qkv, nqkv * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_dqkv, nqkv * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_dout, nout * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_out, nout * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_lse, nrow * sizeof(float)));
    cuda_check(cudaMalloc(&d_D, nrow * sizeof(float)));
    cuda_check(cudaMemcpy(d_qkv, h_qkv, nqkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_dout, h_dout, nout * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(d_out, 0xFF, nout * sizeof(bf16)));
    cuda_check(cudaMemset(d_lse, 0xFF, nrow * sizeof(float)));
    cuda_check(cudaDeviceSynchronize());  // the copies and memsets ran on the legacy stream, which st does not wait for
    fwd(self, d_out, d_lse, d_qkv, B, T, C, NH, NKV, st);
    cuda_check(cudaStreamSynchronize(st));

    AttRun r = {NULL, NULL, NULL, 0};
    r.out = (bf16*)malloc_check(nout * sizeof(bf16));
    r.lse = (float*)malloc_check(nrow * sizeof(float));
    cuda_check(cudaMemcpy(r.out, d_out, nout * sizeof(bf16), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(r.lse, d_lse, nrow * sizeof(float), cudaMemcpyDeviceToHost));
    if (bwd) {
        bf16* g_dqkv[2];
        for (int run = 0; run < 2; run++) {
            cuda_check(cudaMemset(d_dqkv, 0xFF, nqkv * sizeof(bf16)));
            cuda_check(cudaMemset(d_D, 0xFF, nrow * sizeof(float)));
            cuda_check(cudaDeviceSynchronize());  // as before fwd
            bwd(self, d_dqkv, d_D, d_dout, d_out, d_qkv, d_lse, B, T, C, NH, NKV, st);
            cuda_check(cudaStreamSynchronize(st));
            g_dqkv[run] = (bf16*)malloc_check(nqkv * sizeof(bf16));
            cuda_check(cudaMemcpy(g_dqkv[run], d_dqkv, nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
        }
        r.bitwise_repeatable = memcmp(g_dqkv[0], g_dqkv[1], nqkv * sizeof(bf16)) == 0;
        r.dqkv = g_dqkv[0];
        free(g_dqkv[1]);
    }
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_dqkv)); cuda_check(cudaFree(d_dout));
    cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_lse)); cuda_check(cudaFree(d_D));
    return r;
}

// Runs fwd (and bwd when given) on random inputs of the shape, twice for the backward (bitwise
// repeatability), and compares everything with the fp64 reference. NKV == NH: GPT-2's qkv (B, T, 3C).
// theta > 0: the implementation applies RoPE with that base to q and k (qkv holds them unrotated, dq and
// dk are with respect to the unrotated values); 0: no RoPE.
static AttCheck att_check_rope(AttFwdFn fwd, AttBwdFn bwd, void* self, int B, int T, int NH, int NKV, int hs,
                               double theta, uint64_t seed, cudaStream_t st) {
    int C = NH * hs, G = NH / NKV;
    size_t W = (size_t)(NH + 2 * NKV) * hs, nqkv = (size_t)B * T * W, nout = (size_t)B * T * C;
    size_t nrow = (size_t)B * NH * T;
    bf16* h_qkv = (bf16*)malloc_check(nqkv * sizeof(bf16));
    bf16* h_dout = (bf16*)malloc_check(nout * sizeof(bf16));
    att_inputs(h_qkv, h_dout, B, T, NH, NKV, hs, seed);
    double* r_qkv = (double*)malloc_check(nqkv * sizeof(double));
    double* r_dout = (double*)malloc_check(nout * sizeof(double));
    for (size_t i = 0; i < nqkv; i++) r_qkv[i] = __bfloat162float(h_qkv[i]);
    for (size_t i = 0; i < nout; i++) r_dout[i] = __bfloat162float(h_dout[i]);
    if (theta > 0) {
        // the rotated q and k (q heads, then k heads), rounded to bf16: the layer keeps them so (the
        // backward reads them back), and without this rounding the reference would differ from any bf16
        // implementation by ~2^-9 of each score (lse off by ~5e-3, past its tolerance) whatever its kernels
        ref_rope_forward(r_qkv, r_qkv, B, T, NH + NKV, hs, (int)W, theta);
        for (size_t i = 0; i < nqkv; i++)
            if (i % W < (size_t)(NH + NKV) * hs) r_qkv[i] = __bfloat162float(__double2bfloat16(r_qkv[i]));
    }
    // reference: out and the probabilities, lse recomputed in fp64, dqkv (the reference accumulates);
    // att zeroed, though the forward writes all of it, so that gcc need not prove that it does
    double* r_att = (double*)calloc_check((size_t)B * NH * T * T, sizeof(double));
    double* r_out = (double*)malloc_check(nout * sizeof(double));
    double* r_lse = (double*)malloc_check(nrow * sizeof(double));
    double* r_dqkv = (double*)calloc_check(nqkv, sizeof(double));
    ref_attention_forward(r_out, r_att, r_qkv, B, T, NH, NKV, hs);
    ref_attention_backward(r_dqkv, r_dout, r_qkv, r_att, B, T, NH, NKV, hs);
    if (theta > 0) ref_rope_backward(r_dqkv, r_dqkv, B, T, NH + NKV, hs, (int)W, theta);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = r_qkv + ((size_t)b * T + t) * W + (size_t)h * hs;
                const double* k = r_qkv + (size_t)b * T * W + (size_t)(NH + h / G) * hs;
                double s[8192], mx = -INFINITY, sum = 0;  // T ≤ 8192 in the checks
                for (int t2 = 0; t2 <= t; t2++) {
                    s[t2] = ref_dot(q, k + (size_t)t2 * W, hs) / sqrt((double)hs);
                    mx = s[t2] > mx ? s[t2] : mx;
                }
                for (int t2 = 0; t2 <= t; t2++) sum += exp(s[t2] - mx);
                r_lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }

    AttRun g = att_run(fwd, bwd, self, h_qkv, h_dout, B, T, NH, NKV, hs, st);
    AttCheck r;
    memset(&r, 0, sizeof(r));
    r.rope = theta > 0;
    r.out = att_compare([&](size_t i) { return (double)__bfloat162float(g.out[i]); }, r_out, nout, 0, 0, 0);
    r.lse = att_compare([&](size_t i) { return (double)g.lse[i]; }, r_lse, nrow, 0, 0, 0);
    r.lse.rel_l2 = r.lse.max_abs;  // lse is compared in absolute terms (it is a log)
    r.hash = att_fnv1a(att_fnv1a(0xcbf29ce484222325ULL, g.out, nout * sizeof(bf16)), g.lse, nrow * sizeof(float));
    if (bwd) {
        r.bitwise_repeatable = g.bitwise_repeatable;
        r.hash = att_fnv1a(r.hash, g.dqkv, nqkv * sizeof(bf16));
        auto get = [&](size_t i) { return (double)__bfloat162float(g.dqkv[i]); };
        // a row of W: NH q heads, then NKV k heads, then NKV v heads
        size_t kq = (size_t)NH * hs, kv = (size_t)NKV * hs;
        r.dq = att_compare(get, r_dqkv, nqkv, W, 0, kq);
        r.dk = att_compare(get, r_dqkv, nqkv, W, kq, kq + kv);
        r.dv = att_compare(get, r_dqkv, nqkv, W, kq + kv, W);
    }
    att_run_free(&g);
    free(h_qkv); free(h_dout); free(r_qkv); free(r_dout); free(r_att); free(r_out); free(r_lse); free(r_dqkv);
    return r;
}

static AttCheck att_check(AttFwdFn fwd, AttBwdFn bwd, void* self, int B, int T, int NH, int NKV, int hs,
                          uint64_t seed, cudaStream_t st) {
    return att_check_rope(fwd, bwd, self, B, T, NH, NKV, hs, 0.0, seed, st);
}

// Tolerances, relative L2 against fp64 (lse: max abs). bf16 has an 8-bit significand: one rounding is
// ≤ 2^-9 relative (RMS ~1.1e-3). out carries two (P before P·V, out itself), the gradients three or
// four (P or dS, the bf16 out inside D, the result), all uncorrelated, so ~2–4e-3 is expected; 1e-2
// leaves a 2.5–5x margin and still catches any indexing or masking error (those give O(1) errors).
// lse is fp32 from exact bf16 products: ~1e-5 expected, 1e-3 allowed.
// With RoPE the products are no longer exactly the reference's: the GPU rotates in fp32, the reference
// in double, and both round to bf16; an element within ~1e-7 of a rounding midpoint (a few in 10^5)
// lands on the other bf16 neighbour. One such element moves its scores by up to ulp(q)·|k|/√hs, at
// these inputs (|q|, |k| ≤ 2√2 after the rotation) 2^-6·2.9/√hs: 5.7e-3 at hs = 64, 8e-3 at hs = 32,
// and the lse by at most that: 1e-2 allowed. A wrong angle, pair or sign moves the lse by O(0.1–1).
#define ATT_TOL_OUT 1e-2
#define ATT_TOL_GRAD 1e-2
#define ATT_TOL_LSE 1e-3
#define ATT_TOL_LSE_ROPE 1e-2

static inline double att_tol_lse(const AttCheck* r) { return r->rope ? ATT_TOL_LSE_ROPE : ATT_TOL_LSE; }

static inline int att_check_ok(const AttCheck* r, int with_bwd) {
    int ok = att_err_ok(r->out, ATT_TOL_OUT) && att_err_ok(r->lse, att_tol_lse(r));
    if (with_bwd)
        ok = ok && att_err_ok(r->dq, ATT_TOL_GRAD) && att_err_ok(r->dk, ATT_TOL_GRAD) &&
             att_err_ok(r->dv, ATT_TOL_GRAD) && r->bitwise_repeatable;
    return ok;
}

static inline void att_check_print(const AttCheck* r, int with_bwd) {
    att_print_err("out", r->out);
    att_print_err("lse", r->lse);
    if (!with_bwd) return;
    att_print_err("dq", r->dq);
    att_print_err("dk", r->dk);
    att_print_err("dv", r->dv);
    printf("    two backward runs bitwise %s; outputs' hash %016llx\n", r->bitwise_repeatable ? "identical" : "DIFFERENT",
           (unsigned long long)r->hash);
}
