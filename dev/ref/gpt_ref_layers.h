// gpt_ref_layers.h: the layers of the CPU GPT-2 reference (dev/ref/gpt_ref.h), one forward/backward
// pair each, in plain single-threaded C: encoder, LayerNorm, matmul, causal attention (grouped-query, of
// which GPT-2's is the case of one key/value head per query head), GELU, cross-entropy;
// and what every reference model shares: carving one allocation into tensors, the AdamW update of one
// array and a model's optimizer step, which applies it tensor by tensor, the sum of squares behind
// the gradient norms, and a forward's check of its batch and its mean loss.
// Argument order everywhere: outputs, inputs, weights, sizes. Backward functions ACCUMULATE (+=) into
// their outputs, except where a comment says "assigned". A test of one CUDA kernel can include this file
// alone.
//
// gpt_real is float, or double when GPT_REF_DOUBLE is defined before the include. Transcendental
// functions and long reductions (LayerNorm statistics, softmax sums) run in double either way; dot
// products accumulate in gpt_real. Compiles as C11 (gcc) and as C++17 (nvcc).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "../../llmc/core/check.h"

#ifdef GPT_REF_DOUBLE
typedef double gpt_real;
#else
typedef float gpt_real;
#endif

// Eight partial sums: a single running sum makes every add wait for the previous one and cannot be
// vectorized without reassociation; with a fixed order the result is still deterministic.
static inline gpt_real gpt_ref_dot(const gpt_real* a, const gpt_real* b, int n) {
    gpt_real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    gpt_real s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < 8; k++) s += acc[k];
    return s;
}

// y += alpha * x: elementwise, so the compiler vectorizes it as written
static inline void gpt_ref_axpy(gpt_real* y, gpt_real alpha, const gpt_real* x, int n) {
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

// out (B, T, C) = wte[inputs] + wpe[t]
static inline void gpt_ref_encoder_forward(gpt_real* out, const int* inputs, const gpt_real* wte,
                                           const gpt_real* wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            gpt_real* o = out + ((size_t)b * T + t) * C;
            const gpt_real* e = wte + (size_t)inputs[b * T + t] * C;
            const gpt_real* p = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
        }
}

static inline void gpt_ref_encoder_backward(gpt_real* dwte, gpt_real* dwpe, const gpt_real* dout,
                                            const int* inputs, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const gpt_real* d = dout + ((size_t)b * T + t) * C;
            gpt_ref_axpy(dwte + (size_t)inputs[b * T + t] * C, 1, d, C);
            gpt_ref_axpy(dwpe + (size_t)t * C, 1, d, C);
        }
}

// out (N, C) = (inp - mean) * rstd * weight + bias per row, eps 1e-5 as GPT-2; mean, rstd (N,) saved.
// Statistics in double with the two-pass variance: the float build must not lose digits to cancellation.
static inline void gpt_ref_layernorm_forward(gpt_real* out, gpt_real* mean, gpt_real* rstd, const gpt_real* inp,
                                             const gpt_real* weight, const gpt_real* bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const gpt_real* x = inp + (size_t)n * C;
        gpt_real* o = out + (size_t)n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) o[i] = (gpt_real)((x[i] - m) * s * weight[i] + bias[i]);
        mean[n] = (gpt_real)m;
        rstd[n] = (gpt_real)s;
    }
}

// With xhat = (x - mean) * rstd and g = dout * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight += dout * xhat,  dbias += dout.
static inline void gpt_ref_layernorm_backward(gpt_real* dinp, gpt_real* dweight, gpt_real* dbias,
                                              const gpt_real* dout, const gpt_real* inp, const gpt_real* mean,
                                              const gpt_real* rstd, const gpt_real* weight, int N, int C) {
    for (int n = 0; n < N; n++) {
        const gpt_real* x = inp + (size_t)n * C;
        const gpt_real* d = dout + (size_t)n * C;
        gpt_real* dx = dinp + (size_t)n * C;
        double m = mean[n], s = rstd[n], g_mean = 0, gx_mean = 0;
        for (int i = 0; i < C; i++) {
            double g = (double)d[i] * weight[i];
            g_mean += g;
            gx_mean += g * (x[i] - m) * s;
        }
        g_mean /= C;
        gx_mean /= C;
        for (int i = 0; i < C; i++) {
            double xhat = (x[i] - m) * s;
            dbias[i] += d[i];
            dweight[i] += (gpt_real)(d[i] * xhat);
            dx[i] += (gpt_real)(s * ((double)d[i] * weight[i] - g_mean - xhat * gx_mean));
        }
    }
}

// Row tiles of the input stay in cache while the weight streams past once per tile: for the LM head
// (W = 50304 x C) a row-by-row loop would re-read all of W for every one of the N rows.
#define GPT_REF_ROW_TILE 64

// out (N, OC) = inp (N, IC) · weightᵀ + bias, weight (OC, IC) row-major; bias may be NULL.
static inline void gpt_ref_matmul_forward(gpt_real* out, const gpt_real* inp, const gpt_real* weight,
                                          const gpt_real* bias, int N, int IC, int OC) {
    for (int n0 = 0; n0 < N; n0 += GPT_REF_ROW_TILE) {
        int n1 = n0 + GPT_REF_ROW_TILE < N ? n0 + GPT_REF_ROW_TILE : N;
        for (int o = 0; o < OC; o++) {
            const gpt_real* w = weight + (size_t)o * IC;
            gpt_real b = bias ? bias[o] : 0;
            for (int n = n0; n < n1; n++)
                out[(size_t)n * OC + o] = b + gpt_ref_dot(inp + (size_t)n * IC, w, IC);
        }
    }
}

// y += a[0] x[0] + a[1] x[1] + a[2] x[2] + a[3] x[3]: y is loaded and stored once per four rows (an
// axpy per row is bound by exactly those loads and stores); elementwise, so it vectorizes as written
static inline void gpt_ref_axpy4(gpt_real* y, const gpt_real a[4], const gpt_real* const x[4], int n) {
    for (int i = 0; i < n; i++) y[i] += a[0] * x[0][i] + a[1] * x[1][i] + a[2] * x[2][i] + a[3] * x[3][i];
}

// dinp (N, IC) += dout · weight, dweight (OC, IC) += doutᵀ · inp, dbias (OC) += column sums of dout
// (dbias may be NULL). Both products are axpys over contiguous rows (the i-k-j order), four rows at a
// time (a group past the end is padded with coefficient 0), in row tiles as above. Groups whose dout
// entries are all exactly 0 (padded vocabulary columns, ignored positions) are skipped.
static inline void gpt_ref_matmul_backward(gpt_real* dinp, gpt_real* dweight, gpt_real* dbias, const gpt_real* dout,
                                           const gpt_real* inp, const gpt_real* weight, int N, int IC, int OC) {
    for (int n0 = 0; n0 < N; n0 += GPT_REF_ROW_TILE) {
        int n1 = n0 + GPT_REF_ROW_TILE < N ? n0 + GPT_REF_ROW_TILE : N;
        for (int o0 = 0; o0 < OC; o0 += 4) { // dinp rows take four weight rows at a time
            const gpt_real* w[4];
            for (int k = 0; k < 4; k++) w[k] = weight + (size_t)(o0 + k < OC ? o0 + k : o0) * IC;
            for (int n = n0; n < n1; n++) {
                gpt_real a[4];
                for (int k = 0; k < 4; k++) a[k] = o0 + k < OC ? dout[(size_t)n * OC + o0 + k] : 0;
                if (a[0] != 0 || a[1] != 0 || a[2] != 0 || a[3] != 0) gpt_ref_axpy4(dinp + (size_t)n * IC, a, w, IC);
            }
        }
        for (int o = 0; o < OC; o++) { // dweight rows take four input rows at a time
            gpt_real db = 0;
            for (int n = n0; n < n1; n += 4) {
                gpt_real a[4];
                const gpt_real* x[4];
                for (int k = 0; k < 4; k++) {
                    a[k] = n + k < n1 ? dout[(size_t)(n + k) * OC + o] : 0;
                    x[k] = inp + (size_t)(n + k < n1 ? n + k : n) * IC;
                    db += a[k];
                }
                if (a[0] != 0 || a[1] != 0 || a[2] != 0 || a[3] != 0) gpt_ref_axpy4(dweight + (size_t)o * IC, a, x, IC);
            }
            if (dbias) dbias[o] += db;
        }
    }
}

// Grouped-query causal attention. qkv (B, T, (NH + 2 NKV) hs): per token, NH query heads, then NKV key
// heads, then NKV value heads, hs channels each (q and k already rotated in a Llama-style model). Query
// head h reads key/value head h / (NH / NKV); NKV == NH is GPT-2's multi-head attention, NKV == 1
// multi-query.
// att (B, NH, T, T) gets the softmax probabilities (0 above the diagonal), atty (B, T, NH hs) the
// probability-weighted values, heads side by side. Scores are scaled by 1/sqrt(hs).
static inline void gpt_ref_attention_gqa_forward(gpt_real* atty, gpt_real* att, const gpt_real* qkv,
                                                 int B, int T, int NH, int NKV, int hs) {
    int stride = (NH + 2 * NKV) * hs, group = NH / NKV;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                int kh = NH + h / group, vh = NH + NKV + h / group; // head slots within a row
                const gpt_real* q = qkv + ((size_t)b * T + t) * stride + (size_t)h * hs;
                gpt_real* a = att + (((size_t)b * NH + h) * T + t) * T;
                gpt_real* y = atty + ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
                double maxv = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const gpt_real* k = qkv + ((size_t)b * T + t2) * stride + (size_t)kh * hs;
                    a[t2] = (gpt_real)(gpt_ref_dot(q, k, hs) * scale);
                    if (a[t2] > maxv) maxv = a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    double e = exp(a[t2] - maxv);
                    a[t2] = (gpt_real)e;
                    sum += e;
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] = (gpt_real)(a[t2] / sum);
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
                for (int i = 0; i < hs; i++) y[i] = 0;
                for (int t2 = 0; t2 <= t; t2++)
                    gpt_ref_axpy(y, a[t2], qkv + ((size_t)b * T + t2) * stride + (size_t)vh * hs, hs);
            }
}

// dqkv (B, T, (NH + 2 NKV) hs) += gradient from datty (B, T, NH hs). With p = att row and
// dp[t2] = dy · v[t2], the softmax backward is ds = p * (dp - sum(p * dp)); dp is recomputed in the
// second pass instead of being stored (T is small), so the function needs no scratch. The NH / NKV
// query heads of a group all add into their shared key and value heads.
static inline void gpt_ref_attention_gqa_backward(gpt_real* dqkv, const gpt_real* datty, const gpt_real* qkv,
                                                  const gpt_real* att, int B, int T, int NH, int NKV, int hs) {
    int stride = (NH + 2 * NKV) * hs, group = NH / NKV;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                int kh = NH + h / group, vh = NH + NKV + h / group;
                size_t q_off = ((size_t)b * T + t) * stride + (size_t)h * hs;
                const gpt_real* a = att + (((size_t)b * NH + h) * T + t) * T;
                const gpt_real* dy = datty + ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
                double pdp = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t v_off = ((size_t)b * T + t2) * stride + (size_t)vh * hs;
                    pdp += a[t2] * gpt_ref_dot(dy, qkv + v_off, hs);
                    gpt_ref_axpy(dqkv + v_off, a[t2], dy, hs);
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t k_off = ((size_t)b * T + t2) * stride + (size_t)kh * hs;
                    size_t v_off = ((size_t)b * T + t2) * stride + (size_t)vh * hs;
                    double dp = gpt_ref_dot(dy, qkv + v_off, hs);
                    gpt_real ds = (gpt_real)(a[t2] * (dp - pdp) * scale);
                    gpt_ref_axpy(dqkv + q_off, ds, qkv + k_off, hs);
                    gpt_ref_axpy(dqkv + k_off, ds, qkv + q_off, hs);
                }
            }
}

// GPT-2's causal self-attention: the grouped-query attention above with one key/value head per query
// head. qkv (B, T, 3C): head h of token t reads q, k, v at channels h*hs, C + h*hs and 2C + h*hs; att
// (B, NH, T, T), atty (B, T, C).
static inline void gpt_ref_attention_forward(gpt_real* atty, gpt_real* att, const gpt_real* qkv,
                                             int B, int T, int C, int NH) {
    gpt_ref_attention_gqa_forward(atty, att, qkv, B, T, NH, NH, C / NH);
}

// dqkv (B, T, 3C) += gradient from datty (B, T, C)
static inline void gpt_ref_attention_backward(gpt_real* dqkv, const gpt_real* datty, const gpt_real* qkv,
                                              const gpt_real* att, int B, int T, int C, int NH) {
    gpt_ref_attention_gqa_backward(dqkv, datty, qkv, att, B, T, NH, NH, C / NH);
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define GPT_REF_GELU_K 0.7978845608028654 // sqrt(2 / pi)

static inline void gpt_ref_gelu_forward(gpt_real* out, const gpt_real* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (gpt_real)(0.5 * x * (1.0 + tanh(GPT_REF_GELU_K * (x + 0.044715 * x * x * x))));
    }
}

// dinp = dout * gelu'(inp) (assigned, not accumulated: dinp may be dout itself)
static inline void gpt_ref_gelu_backward(gpt_real* dinp, const gpt_real* dout, const gpt_real* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double th = tanh(GPT_REF_GELU_K * (x + 0.044715 * x * x * x));
        double du = GPT_REF_GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] = (gpt_real)(dout[i] * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du));
    }
}

// losses, lse (N,) from logits (N, Vp), softmax over the first V columns only. Rows with target -1 get
// loss 0 (their lse is still computed). Returns the number of counted rows.
static inline int gpt_ref_crossentropy_forward(gpt_real* losses, gpt_real* lse, const gpt_real* logits,
                                               const int* targets, int N, int V, int Vp) {
    int counted = 0;
    for (int n = 0; n < N; n++) {
        const gpt_real* z = logits + (size_t)n * Vp;
        double maxv = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            if (z[j] > maxv) maxv = z[j];
        for (int j = 0; j < V; j++) sum += exp(z[j] - maxv);
        double l = maxv + log(sum);
        lse[n] = (gpt_real)l;
        losses[n] = targets[n] < 0 ? 0 : (gpt_real)(l - z[targets[n]]);
        counted += targets[n] >= 0;
    }
    return counted;
}

// dlogits (N, Vp) = dloss * (softmax(logits[:V]) - onehot(target)) in counted rows; 0 in ignored rows
// and in the padded columns >= V (assigned, not accumulated).
static inline void gpt_ref_crossentropy_backward(gpt_real* dlogits, const gpt_real* logits, const gpt_real* lse,
                                                 const int* targets, double dloss, int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const gpt_real* z = logits + (size_t)n * Vp;
        gpt_real* dz = dlogits + (size_t)n * Vp;
        memset(dz, 0, (size_t)Vp * sizeof(gpt_real));
        if (targets[n] < 0) continue;
        // the one-hot is subtracted in double: p[target] can be close to 1
        for (int j = 0; j < V; j++) dz[j] = (gpt_real)(dloss * (exp(z[j] - lse[n]) - (j == targets[n])));
    }
}

// out = a + b elementwise (out may be a or b)
static inline void gpt_ref_residual_forward(gpt_real* out, const gpt_real* a, const gpt_real* b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// Points each *ptrs[i] at consecutive slices of base (NULL base: all NULL); returns the total count.
static inline size_t gpt_ref_carve(gpt_real** const ptrs[], const size_t sizes[], int n, gpt_real* base) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        *ptrs[i] = base ? base + off : NULL;
        off += sizes[i];
    }
    return off;
}

// AdamW on one array at step t = 1, 2, ... (PyTorch's formulation, decoupled weight decay wd):
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p).
// Computed in double, stored as gpt_real. params, m, v (n,) are updated in place; the model's step
// picks wd per tensor.
static inline void gpt_ref_adamw_update(gpt_real* params, gpt_real* m, gpt_real* v, const gpt_real* grads, size_t n,
                                        double lr, double beta1, double beta2, double eps, double wd, int t) {
    double c1 = 1.0 - pow(beta1, t), c2 = 1.0 - pow(beta2, t);
    for (size_t j = 0; j < n; j++) {
        double g = grads[j], p = params[j];
        double mj = beta1 * m[j] + (1.0 - beta1) * g;
        double vj = beta2 * v[j] + (1.0 - beta2) * g * g;
        m[j] = (gpt_real)mj;
        v[j] = (gpt_real)vj;
        params[j] = (gpt_real)(p - lr * ((mj / c1) / (sqrt(vj / c2) + eps) + wd * p));
    }
}

// A model's optimizer step: gpt_ref_adamw_update on each of n tensors laid out back to back in params,
// m, v and grads (sizes[i] elements each), with weight decay wd where decays(i) is true, 0 elsewhere.
static inline void gpt_ref_adamw_tensors(gpt_real* params, gpt_real* m, gpt_real* v, const gpt_real* grads,
                                         const size_t sizes[], int n, int (*decays)(int), double lr,
                                         double beta1, double beta2, double eps, double wd, int t) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        gpt_ref_adamw_update(params + off, m + off, v + off, grads + off, sizes[i], lr, beta1, beta2, eps,
                             decays(i) ? wd : 0.0, t);
        off += sizes[i];
    }
}

// Sum of squares, in double (the gradient norms)
static inline double gpt_ref_sum_squares(const gpt_real* x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

// A forward's batch of n tokens: every input id in [0, V), every target in [-1, V) (targets may be
// NULL). who, the model's forward, leads the message, so that the error names the model it came from.
static inline void gpt_ref_check_batch(const char* who, const int* inputs, const int* targets, int n, int V) {
    char what[160];
    for (int i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) {
            snprintf(what, sizeof(what), "%s: an input token id is outside [0, vocab_size)", who);
            check_fail(what, "check the token data");
        }
        if (targets && (targets[i] < -1 || targets[i] >= V)) {
            snprintf(what, sizeof(what), "%s: a target is outside [-1, vocab_size)", who);
            check_fail(what, "-1 marks an ignored position");
        }
    }
}

// A forward's loss: the cross-entropy of each of the N positions into losses (lse alongside), their
// mean over the counted positions (0 when none counts) returned, and the number counted in *num_counted
// (the backward divides by it).
static inline gpt_real gpt_ref_mean_loss(gpt_real* losses, gpt_real* lse, const gpt_real* logits, const int* targets,
                                         int N, int V, int Vp, int* num_counted) {
    *num_counted = gpt_ref_crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += losses[i];
    return (gpt_real)(*num_counted ? sum / *num_counted : 0);
}
