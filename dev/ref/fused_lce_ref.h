// fused_lce_ref.h: the CPU fp64 reference of the fused linear cross-entropy (llmc/head/fused_lce.cuh), and the
// helpers that its tests share: bf16 rounding, seeded random numbers, error statistics against the
// reference. Header-only host code that compiles as C11 (gcc) and as CUDA C++17 (nvcc).
//
// Semantics (the GPU kernels follow them exactly):
//   Inputs x (N, C), W (Vp, C), targets (N). Only the first V rows of W count: rows j >= V have logit
//   -inf (they are never read here) and their dW rows stay untouched.
//   Per row i: z_j = x_i · w_j for j < V; s_j = softcap·tanh(z_j/softcap) when softcap > 0, else z_j;
//   lse_i = log Σ_{j<V} exp(s_j), computed for every row, ignored rows too;
//   loss_i = lse_i − (1−ε)·s_{t_i} − (ε/V)·Σ_j s_j + z_loss·lse_i²   (ε = label_smoothing),
//   which is −Σ_j q_j·log p_j + z_loss·lse² for the smoothed target q = (1−ε)·onehot(t_i) + ε/V.
//   A row is ignored when t_i == ignore_index: loss_i = 0, dx_i = 0, no dW contribution, and it is not
//   counted in N_valid. (A target outside [0, V) is treated as ignored too, as the GPU does; the GPU also
//   raises an error flag, this reference prints a warning.)
//   Mean loss = Σ_i loss_i / N_valid, and 0 when N_valid = 0.
//   Gradients, with scale_i = dloss / N_valid (scalar upstream gradient of the mean; 0 when N_valid = 0)
//   or scale_i = dloss_rows[i] (per-row upstream gradients, e.g. per-token weights; no division), and
//   scale_i = 0 for ignored rows:
//     dL/ds_j = scale_i·(p_j·(1 + 2·z_loss·lse_i) − (1−ε)·[j = t_i] − ε/V),   p_j = exp(s_j − lse_i)
//     dL/dz_j = dL/ds_j · (1 − tanh²(z_j/softcap)) under softcap
//     dx_i = Σ_j dL/dz_ij · w_j (written);  dW_j += Σ_i dL/dz_ij · x_i (ADDED: W is the tied embedding).
//
// Numerics: x and W arrive as float (the GPU tests pass bf16 values, which floats hold exactly); every
// product and sum is in double, so the reference is ~1e-15 relative from the exact value and any error
// a test sees belongs to the code under test.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "../../llmc/core/check.h"
#include "../../llmc/head/fused_lce_options.h"  // FusedLceOptions, fused_lce_options_default()
#include "../../llmc/core/rand.h"               // rand_uniform, rand_normal (splitmix64)

// --- bf16 and random numbers for test data ------------------------------------------------------

// float -> bf16 bits, round to nearest even (what __float2bfloat16 does). NaN stays a (quiet) NaN;
// values past the largest bf16 round to inf, as they should.
static inline uint16_t bf16_bits_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);  // ties go to the even upper half
    return (uint16_t)(u >> 16);
}
static inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}
// the nearest bf16 value, as a float: data made with it reaches GPU and reference identically
static inline float bf16_round(float f) { return bf16_bits_to_float(bf16_bits_from_float(f)); }

// --- the reference ------------------------------------------------------------------------------

// 1 when row i counts (enters N_valid, has a loss and a gradient)
static inline int fused_lce_ref_row_counts(int target, int V, FusedLceOptions opt) {
    return target != opt.ignore_index && target >= 0 && target < V;
}

// The core: writes loss_rows, lse (N) and, when dx/dW are not NULL, dx (N, C) and dW += gradient for
// rows < V. Returns the mean loss. dloss_rows == NULL selects the scalar form (scale dloss / N_valid).
// round_g_bf16 = 1 rounds each dL/dz to bf16 before the two products, as the GPU does before its bf16
// MMAs: not the exact gradient, but a model of the kernel's one deliberate rounding, so that a test can
// check everything else to ~1e-5 (l2) instead of to the bf16 bound (rarely, the kernel's fp32 noise
// flips one rounding by an ulp: compare with the l2 norm, not element by element).
static double fused_lce_ref_compute(double* loss_rows, double* lse,    // (N), (N)
                                    double* dx, double* dW,            // (N, C) written, (Vp, C) added to; or NULL
                                    const float* x, const int* targets, // (N, C), (N)
                                    const float* W,                    // (Vp, C), rows >= V never read
                                    int N, int C, int V, FusedLceOptions opt,
                                    double dloss, const double* dloss_rows,  // dloss_rows: (N) or NULL
                                    int round_g_bf16) {
    double eps = opt.label_smoothing, cap = opt.softcap, zl = opt.z_loss;
    double* z = (double*)malloc_check((size_t)V * sizeof(double));  // raw logits of one row
    double* s = (double*)malloc_check((size_t)V * sizeof(double));  // after the soft cap
    int n_valid = 0, n_bad = 0;
    for (int i = 0; i < N; i++) {
        n_valid += fused_lce_ref_row_counts(targets[i], V, opt);
        n_bad += targets[i] != opt.ignore_index && !fused_lce_ref_row_counts(targets[i], V, opt);
    }
    if (n_bad) fprintf(stderr, "warning: fused_lce_ref: %d targets outside [0, %d), treated as ignored\n", n_bad, V);
    double total = 0.0;
    for (int i = 0; i < N; i++) {
        const float* xi = x + (size_t)i * C;
        double mx = -INFINITY;
        for (int j = 0; j < V; j++) {
            const float* wj = W + (size_t)j * C;
            double d = 0.0;
            for (int k = 0; k < C; k++) d += (double)xi[k] * (double)wj[k];
            z[j] = d;
            s[j] = cap > 0.0 ? cap * tanh(d / cap) : d;
            if (s[j] > mx) mx = s[j];
        }
        double se = 0.0, ssum = 0.0;  // relative to the max, so that exp cannot overflow
        for (int j = 0; j < V; j++) { se += exp(s[j] - mx); ssum += s[j]; }
        double l = mx + log(se);
        int t = targets[i], counts = fused_lce_ref_row_counts(t, V, opt);
        lse[i] = l;
        loss_rows[i] = counts ? l - (1.0 - eps) * s[t] - eps / V * ssum + zl * l * l : 0.0;
        total += loss_rows[i];
        if (dx) memset(dx + (size_t)i * C, 0, (size_t)C * sizeof(double));
        double scale = !counts ? 0.0 : dloss_rows ? dloss_rows[i] : dloss / n_valid;
        if (scale == 0.0 || (!dx && !dW)) continue;
        for (int j = 0; j < V; j++) {
            double g = scale * (exp(s[j] - l) * (1.0 + 2.0 * zl * l) - (j == t ? 1.0 - eps : 0.0) - eps / V);
            if (cap > 0.0) { double th = tanh(z[j] / cap); g *= 1.0 - th * th; }
            if (round_g_bf16) g = bf16_round((float)g);
            const float* wj = W + (size_t)j * C;
            if (dx) for (int k = 0; k < C; k++) dx[(size_t)i * C + k] += g * wj[k];
            if (dW) for (int k = 0; k < C; k++) dW[(size_t)j * C + k] += g * xi[k];
        }
    }
    free(z);
    free(s);
    return n_valid > 0 ? total / n_valid : 0.0;
}

typedef struct {
    double loss;        // mean over the valid rows, 0 when there are none
    int n_valid;
    double* loss_rows;  // (N)
    double* lse;        // (N)
    double* dx;         // (N, C)
    double* dW;         // (Vp, C) dW0 + the gradient; rows >= V equal dW0
} FusedLceRefResult;

// Everything at once, in freshly allocated arrays (free with fused_lce_ref_result_free). dW0 (Vp, C) is the
// gradient the head adds into (NULL: zeros). fused_lce_ref_forward_backward is the exact one.
static FusedLceRefResult fused_lce_ref_forward_backward_g(const float* x, const float* W, const int* targets,  // (N, C), (Vp, C), (N)
                                                          int N, int C, int V, int Vp, FusedLceOptions opt,
                                                          double dloss, const double* dloss_rows,  // (N) or NULL
                                                          const float* dW0, int round_g_bf16) {    // (Vp, C) or NULL
    FusedLceRefResult r;
    r.loss_rows = (double*)malloc_check((size_t)N * sizeof(double));
    r.lse = (double*)malloc_check((size_t)N * sizeof(double));
    r.dx = (double*)malloc_check((size_t)N * C * sizeof(double));
    r.dW = (double*)malloc_check((size_t)Vp * C * sizeof(double));
    for (size_t i = 0; i < (size_t)Vp * C; i++) r.dW[i] = dW0 ? (double)dW0[i] : 0.0;
    r.n_valid = 0;
    for (int i = 0; i < N; i++) r.n_valid += fused_lce_ref_row_counts(targets[i], V, opt);
    r.loss = fused_lce_ref_compute(r.loss_rows, r.lse, r.dx, r.dW, x, targets, W, N, C, V, opt, dloss, dloss_rows,
                                   round_g_bf16);
    return r;
}
static FusedLceRefResult fused_lce_ref_forward_backward(const float* x, const float* W, const int* targets,  // (N, C), (Vp, C), (N)
                                                        int N, int C, int V, int Vp, FusedLceOptions opt,
                                                        double dloss, const double* dloss_rows,  // (N) or NULL
                                                        const float* dW0) {                      // (Vp, C) or NULL
    return fused_lce_ref_forward_backward_g(x, W, targets, N, C, V, Vp, opt, dloss, dloss_rows, dW0, 0);
}

// dW of the staged path (llmc/head/fused_lce_staged.cuh) with its exact roundings, for a sharp check of
// everything else: dW0 + Σ_r E_r ⊗ x'_r − (ε/V)·Σ_r scale_r·x_r on rows j < V, where R_r = x_r · mean_{j<V}
// W_j (soft-capped), E_rj = bf16(exp(s_rj − R_r)·c_j), α_r = scale_r·k_r·exp(R_r − lse_r), x'_r = bf16(α_r·x_r)
// and E_rt = bf16((exp(s_rt − R_r) − (1−ε)·exp(lse_r − R_r)/k_r)·c_t). lse from a reference run (fp64).
// Rows whose lse − R exceeds the restage gap are not modelled (the kernel stages them again): NULL then.
static double* fused_lce_ref_staged_dw(const float* x, const float* W, const int* targets, const double* lse,
                                       int N, int C, int V, int Vp, FusedLceOptions opt, double dloss,
                                       const double* dloss_rows, const float* dW0, double gap) {
    double eps = opt.label_smoothing, cap = opt.softcap, zl = opt.z_loss;
    int n_valid = 0;
    for (int i = 0; i < N; i++) n_valid += fused_lce_ref_row_counts(targets[i], V, opt);
    double* dW = (double*)malloc_check((size_t)Vp * C * sizeof(double));
    for (size_t i = 0; i < (size_t)Vp * C; i++) dW[i] = dW0 ? (double)dW0[i] : 0.0;
    double* wmean = (double*)calloc(C, sizeof(double));
    double* u = (double*)calloc(C, sizeof(double));
    double* e = (double*)malloc_check((size_t)V * sizeof(double));
    float* xs = (float*)malloc_check((size_t)C * sizeof(float));
    for (int j = 0; j < V; j++)
        for (int k = 0; k < C; k++) wmean[k] += W[(size_t)j * C + k];
    for (int k = 0; k < C; k++) wmean[k] /= V;
    for (int i = 0; i < N; i++) {
        const float* xi = x + (size_t)i * C;
        int t = targets[i], counts = fused_lce_ref_row_counts(t, V, opt);
        double scale = !counts ? 0.0 : dloss_rows ? dloss_rows[i] : dloss / n_valid;
        double R = 0.0;
        for (int k = 0; k < C; k++) R += xi[k] * wmean[k];
        if (cap > 0.0) R = cap * tanh(R / cap);
        if (lse[i] - R > gap) { free(dW); dW = NULL; break; }
        if (scale == 0.0) continue;
        double k_r = 1.0 + 2.0 * zl * lse[i], alpha = scale * k_r * exp(R - lse[i]);
        for (int k = 0; k < C; k++) { xs[k] = bf16_round((float)(alpha * xi[k])); u[k] += scale * xi[k]; }
        for (int j = 0; j < V; j++) {
            const float* wj = W + (size_t)j * C;
            double z = 0.0;
            for (int k = 0; k < C; k++) z += (double)xi[k] * (double)wj[k];
            double sv = cap > 0.0 ? cap * tanh(z / cap) : z, c = 1.0;
            if (cap > 0.0) { double th = sv / cap; c = 1.0 - th * th; }
            double ev = exp(sv - R);
            if (j == t) ev -= (1.0 - eps) * exp(lse[i] - R) / k_r;
            e[j] = bf16_round((float)(ev * c));
        }
        for (int j = 0; j < V; j++)
            for (int k = 0; k < C; k++) dW[(size_t)j * C + k] += e[j] * xs[k];
    }
    if (dW && eps > 0.0)
        for (int j = 0; j < V; j++)
            for (int k = 0; k < C; k++) dW[(size_t)j * C + k] -= eps / V * u[k];
    free(wmean); free(u); free(e); free(xs);
    return dW;
}

static void fused_lce_ref_result_free(FusedLceRefResult* r) {
    free(r->loss_rows); free(r->lse); free(r->dx); free(r->dW);
    r->loss_rows = r->lse = r->dx = r->dW = NULL;
}

// --- error statistics ---------------------------------------------------------------------------

// Relative error of element i: |got_i − ref_i| / (|ref_i| + FUSED_LCE_REL_FLOOR·max|ref|). The floor keeps
// elements near zero (cancellation in a gradient) from dominating; where max|ref| = 0 any nonzero
// difference is an infinite error. "Of max" tolerances compare max_abs against max_ref instead.
#define FUSED_LCE_REL_FLOOR 1e-3

typedef struct {
    double max_abs;  // max |got − ref|
    double max_rel;  // max relative error, as defined above
    double max_ref;  // max |ref|
    double l2_rel;   // ||got − ref||₂ / ||ref||₂: blind to one odd element, sensitive to a systematic error
    size_t worst;    // index of the element with the largest relative error
} FusedLceErrStats;

// got and ref, each minus base (NULL: 0) when given: compares increments, e.g. of an accumulated dW.
// A NaN in got counts as an infinite error.
static FusedLceErrStats fused_lce_ref_err_stats(const float* got, const double* ref, const float* base, size_t n) {
    FusedLceErrStats e;
    e.max_abs = e.max_rel = e.max_ref = e.l2_rel = 0.0;
    e.worst = 0;
    double sd = 0.0, sr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = ref[i] - (base ? (double)base[i] : 0.0);
        if (fabs(r) > e.max_ref) e.max_ref = fabs(r);
    }
    for (size_t i = 0; i < n; i++) {
        double b = base ? (double)base[i] : 0.0;
        double r = ref[i] - b, d = fabs(((double)got[i] - b) - r);
        if (d != d) d = INFINITY;
        double den = fabs(r) + FUSED_LCE_REL_FLOOR * e.max_ref;
        double rel = d == 0.0 ? 0.0 : den > 0.0 ? d / den : INFINITY;
        if (d > e.max_abs) e.max_abs = d;
        if (rel > e.max_rel) { e.max_rel = rel; e.worst = i; }
        sd += d * d;
        sr += r * r;
    }
    e.l2_rel = sd == 0.0 ? 0.0 : sr > 0.0 ? sqrt(sd / sr) : INFINITY;
    return e;
}

// Prints "name: max_abs=... (... of max|ref| ...) l2_rel=... max_rel=... at [i] (got ..., ref ...)" and
// returns the stats.
static FusedLceErrStats fused_lce_ref_compare(const char* name, const float* got, const double* ref, const float* base, size_t n) {
    FusedLceErrStats e = fused_lce_ref_err_stats(got, ref, base, n);
    double b = (n && base) ? (double)base[e.worst] : 0.0;
    printf("  %-20s max_abs=%.2e (%.2e of max|ref| %.3g) l2_rel=%.2e max_rel=%.2e at [%zu] (got %.7g ref %.7g)\n",
           name, e.max_abs, e.max_ref > 0.0 ? e.max_abs / e.max_ref : 0.0, e.max_ref, e.l2_rel, e.max_rel, e.worst,
           n ? (double)got[e.worst] - b : 0.0, n ? ref[e.worst] - b : 0.0);
    return e;
}

// The same for bf16 outputs (bits as uint16_t, e.g. a downloaded dx).
static FusedLceErrStats fused_lce_ref_compare_bf16(const char* name, const uint16_t* got, const double* ref, size_t n) {
    float* f = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = bf16_bits_to_float(got[i]);
    FusedLceErrStats e = fused_lce_ref_compare(name, f, ref, NULL, n);
    free(f);
    return e;
}

// Tolerances of fused_lce_ref_check_outputs: lse and loss as max_rel; dx and the dW increment as max_abs over
// max|ref| (gradients cancel, so "of max" is the meaningful scale for bf16 rounding errors).
typedef struct { double lse, loss, dx, dW; } FusedLceTolerance;

// Compares every output of the head against the reference; prints one line per output and returns 1
// when all pass. Rows of dW >= V must equal dW0 exactly (NULL: 0). dx and dW may be NULL (loss only).
static int fused_lce_ref_check_outputs(const char* name, const FusedLceRefResult* ref, FusedLceTolerance tol,
                                       float loss, const float* loss_rows, const float* lse,  // (1), (N), (N)
                                       const float* dx, const float* dW,                      // (N, C), (Vp, C)
                                       const float* dW0, int N, int C, int V, int Vp) {       // (Vp, C) or NULL
    int ok = 1;
    printf("%s\n", name);
    ok &= fused_lce_ref_compare("loss (mean)", &loss, &ref->loss, NULL, 1).max_rel <= tol.loss;
    ok &= fused_lce_ref_compare("loss (rows)", loss_rows, ref->loss_rows, NULL, (size_t)N).max_rel <= tol.loss;
    ok &= fused_lce_ref_compare("lse", lse, ref->lse, NULL, (size_t)N).max_rel <= tol.lse;
    if (dx) {
        FusedLceErrStats e = fused_lce_ref_compare("dx", dx, ref->dx, NULL, (size_t)N * C);
        ok &= e.max_abs <= tol.dx * e.max_ref;
    }
    if (dW) {
        FusedLceErrStats e = fused_lce_ref_compare("dW - dW0 (rows < V)", dW, ref->dW, dW0, (size_t)V * C);
        ok &= e.max_abs <= tol.dW * e.max_ref;
        size_t changed = 0;  // padded rows: exactly the values that were there before
        for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) changed += dW[i] != (dW0 ? dW0[i] : 0.0f);
        printf("  %-20s %zu of %zu elements changed\n", "dW rows >= V", changed, (size_t)(Vp - V) * C);
        ok &= changed == 0;
    }
    if (!ok) printf("  FAILED (tolerances: lse %.1e, loss %.1e relative; dx %.1e, dW %.1e of max)\n",
                    tol.lse, tol.loss, tol.dx, tol.dW);
    return ok;
}
