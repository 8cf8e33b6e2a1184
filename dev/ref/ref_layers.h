// ref_layers.h: the layers of the CPU reference model (dev/ref/model_ref.h), one forward/backward pair
// each, in plain single-threaded C, for every block choice of llmc/model/spec.h: the token embedding
// with or without a learned position table, LayerNorm and RMSNorm, matmul with or without a bias, RoPE
// (Hugging Face's rotate_half), causal grouped-query attention (GPT-2's multi-head attention is the case
// NKV = NH), GELU (tanh) and SwiGLU, cross-entropy over the real vocabulary, the residual add. A test of
// one CUDA kernel can include this file alone.
// Argument order everywhere: outputs, inputs, weights, sizes. Backward functions ACCUMULATE (+=) into
// their outputs, except where a comment says "assigned".
//
// ref_real is float, or double when REF_DOUBLE is defined before the include. Transcendental functions
// and long reductions (norm statistics, RoPE angles, softmax sums) run in double either way; dot
// products accumulate in ref_real. Compiles as C11 (gcc) and as C++17 (nvcc): no designated
// initializers, VLAs or compound literals.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifdef REF_DOUBLE
typedef double ref_real;
#else
typedef float ref_real;
#endif

// Eight partial sums: a single running sum makes every add wait for the previous one and cannot be
// vectorized without reassociation; with a fixed order the result is still deterministic.
static inline ref_real ref_dot(const ref_real* a, const ref_real* b, int n) {
    ref_real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    ref_real s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < 8; k++) s += acc[k];
    return s;
}

// y += alpha * x: elementwise, so the compiler vectorizes it as written
static inline void ref_axpy(ref_real* y, ref_real alpha, const ref_real* x, int n) {
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

// --- embedding --------------------------------------------------------------------------------------

// out (B, T, C) = tok[inputs] (+ pos[t]): the token embedding, plus the learned position table where the
// model has one (pos NULL: positions enter through RoPE instead)
static inline void ref_embedding_forward(ref_real* out, const int* inputs, const ref_real* tok, const ref_real* pos,
                                         int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ref_real* o = out + ((size_t)b * T + t) * C;
            const ref_real* e = tok + (size_t)inputs[b * T + t] * C;
            const ref_real* p = pos ? pos + (size_t)t * C : NULL;
            for (int i = 0; i < C; i++) o[i] = p ? e[i] + p[i] : e[i];
        }
}

// dtok (Vp, C) += dout at each input's row, dpos (maxT, C) += dout at each position (dpos NULL: none)
static inline void ref_embedding_backward(ref_real* dtok, ref_real* dpos, const ref_real* dout, const int* inputs,
                                          int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const ref_real* d = dout + ((size_t)b * T + t) * C;
            ref_axpy(dtok + (size_t)inputs[b * T + t] * C, 1, d, C);
            if (dpos) ref_axpy(dpos + (size_t)t * C, 1, d, C);
        }
}

// --- norms ------------------------------------------------------------------------------------------

// out (N, C) = (inp - mean) * rstd * weight + bias per row, eps 1e-5 as GPT-2; mean, rstd (N,) saved.
// Statistics in double with the two-pass variance: the float build must not lose digits to cancellation.
static inline void ref_layernorm_forward(ref_real* out, ref_real* mean, ref_real* rstd, const ref_real* inp,
                                         const ref_real* weight, const ref_real* bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const ref_real* x = inp + (size_t)n * C;
        ref_real* o = out + (size_t)n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) o[i] = (ref_real)((x[i] - m) * s * weight[i] + bias[i]);
        mean[n] = (ref_real)m;
        rstd[n] = (ref_real)s;
    }
}

// With xhat = (x - mean) * rstd and g = dout * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight += dout * xhat,  dbias += dout.
static inline void ref_layernorm_backward(ref_real* dinp, ref_real* dweight, ref_real* dbias,
                                          const ref_real* dout, const ref_real* inp, const ref_real* mean,
                                          const ref_real* rstd, const ref_real* weight, int N, int C) {
    for (int n = 0; n < N; n++) {
        const ref_real* x = inp + (size_t)n * C;
        const ref_real* d = dout + (size_t)n * C;
        ref_real* dx = dinp + (size_t)n * C;
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
            dweight[i] += (ref_real)(d[i] * xhat);
            dx[i] += (ref_real)(s * ((double)d[i] * weight[i] - g_mean - xhat * gx_mean));
        }
    }
}

// out (N, C) = x * rstd * weight per row, rstd = 1 / sqrt(mean(x^2) + eps); rstd (N,) saved.
// Hugging Face's LlamaRMSNorm: no mean subtracted, no bias, eps inside the square root.
static inline void ref_rmsnorm_forward(ref_real* out, ref_real* rstd, const ref_real* inp,
                                       const ref_real* weight, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const ref_real* x = inp + (size_t)n * C;
        ref_real* o = out + (size_t)n * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) o[i] = (ref_real)(x[i] * s * weight[i]);
        rstd[n] = (ref_real)s;
    }
}

// With xhat = x * rstd and g = dout * weight (LayerNorm's formula without the mean terms):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dweight += dout * xhat.
static inline void ref_rmsnorm_backward(ref_real* dinp, ref_real* dweight, const ref_real* dout,
                                        const ref_real* inp, const ref_real* rstd, const ref_real* weight,
                                        int N, int C) {
    for (int n = 0; n < N; n++) {
        const ref_real* x = inp + (size_t)n * C;
        const ref_real* d = dout + (size_t)n * C;
        ref_real* dx = dinp + (size_t)n * C;
        double s = rstd[n], gx_mean = 0;
        for (int i = 0; i < C; i++) gx_mean += (double)d[i] * weight[i] * x[i] * s;
        gx_mean /= C;
        for (int i = 0; i < C; i++) {
            double xhat = x[i] * s;
            dweight[i] += (ref_real)(d[i] * xhat);
            dx[i] += (ref_real)(s * ((double)d[i] * weight[i] - xhat * gx_mean));
        }
    }
}

// --- linear layers ----------------------------------------------------------------------------------

// Row tiles of the input stay in cache while the weight streams past once per tile: for the LM head
// (W = 50304 x C) a row-by-row loop would re-read all of W for every one of the N rows.
#define REF_ROW_TILE 64

// out (N, OC) = inp (N, IC) · weightᵀ + bias, weight (OC, IC) row-major; bias may be NULL.
static inline void ref_matmul_forward(ref_real* out, const ref_real* inp, const ref_real* weight,
                                      const ref_real* bias, int N, int IC, int OC) {
    for (int n0 = 0; n0 < N; n0 += REF_ROW_TILE) {
        int n1 = n0 + REF_ROW_TILE < N ? n0 + REF_ROW_TILE : N;
        for (int o = 0; o < OC; o++) {
            const ref_real* w = weight + (size_t)o * IC;
            ref_real b = bias ? bias[o] : 0;
            for (int n = n0; n < n1; n++)
                out[(size_t)n * OC + o] = b + ref_dot(inp + (size_t)n * IC, w, IC);
        }
    }
}

// y += a[0] x[0] + a[1] x[1] + a[2] x[2] + a[3] x[3]: y is loaded and stored once per four rows (an
// axpy per row is bound by exactly those loads and stores); elementwise, so it vectorizes as written
static inline void ref_axpy4(ref_real* y, const ref_real a[4], const ref_real* const x[4], int n) {
    for (int i = 0; i < n; i++) y[i] += a[0] * x[0][i] + a[1] * x[1][i] + a[2] * x[2][i] + a[3] * x[3][i];
}

// dinp (N, IC) += dout · weight, dweight (OC, IC) += doutᵀ · inp, dbias (OC) += column sums of dout
// (dbias may be NULL). Both products are axpys over contiguous rows (the i-k-j order), four rows at a
// time (a group past the end is padded with coefficient 0), in row tiles as above. Groups whose dout
// entries are all exactly 0 (padded vocabulary columns, ignored positions) are skipped.
static inline void ref_matmul_backward(ref_real* dinp, ref_real* dweight, ref_real* dbias, const ref_real* dout,
                                       const ref_real* inp, const ref_real* weight, int N, int IC, int OC) {
    for (int n0 = 0; n0 < N; n0 += REF_ROW_TILE) {
        int n1 = n0 + REF_ROW_TILE < N ? n0 + REF_ROW_TILE : N;
        for (int o0 = 0; o0 < OC; o0 += 4) { // dinp rows take four weight rows at a time
            const ref_real* w[4];
            for (int k = 0; k < 4; k++) w[k] = weight + (size_t)(o0 + k < OC ? o0 + k : o0) * IC;
            for (int n = n0; n < n1; n++) {
                ref_real a[4];
                for (int k = 0; k < 4; k++) a[k] = o0 + k < OC ? dout[(size_t)n * OC + o0 + k] : 0;
                if (a[0] != 0 || a[1] != 0 || a[2] != 0 || a[3] != 0) ref_axpy4(dinp + (size_t)n * IC, a, w, IC);
            }
        }
        for (int o = 0; o < OC; o++) { // dweight rows take four input rows at a time
            ref_real db = 0;
            for (int n = n0; n < n1; n += 4) {
                ref_real a[4];
                const ref_real* x[4];
                for (int k = 0; k < 4; k++) {
                    a[k] = n + k < n1 ? dout[(size_t)(n + k) * OC + o] : 0;
                    x[k] = inp + (size_t)(n + k < n1 ? n + k : n) * IC;
                    db += a[k];
                }
                if (a[0] != 0 || a[1] != 0 || a[2] != 0 || a[3] != 0) ref_axpy4(dweight + (size_t)o * IC, a, x, IC);
            }
            if (dbias) dbias[o] += db;
        }
    }
}

// out = a + b elementwise (out may be a or b)
static inline void ref_residual_forward(ref_real* out, const ref_real* a, const ref_real* b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// --- positions and attention ------------------------------------------------------------------------

// RoPE in Hugging Face's Llama convention (rotate_half): in a head of hs channels, channel i and
// channel i + hs/2 form a pair (i < hs/2), rotated by the angle pos * theta^(-2i/hs):
//   out[i] = x[i] cos - x[i + hs/2] sin,   out[i + hs/2] = x[i + hs/2] cos + x[i] sin.
// (Meta's original code pairs neighbours 2i, 2i+1 instead; its conversion to Hugging Face permutes the
// rows of q_proj and k_proj. With this convention, exported weights need no permutation.)
// Angles in double: Hugging Face computes inv_freq and pos * inv_freq in fp32, whose rounding shifts
// the angle by up to ~pos * 6e-8 rad; compare with it at tolerances that allow for that.
// sign -1 rotates by minus the angle: the transpose of the rotation, i.e. RoPE's backward.
// out may be inp.
static inline void ref_rope_rotate(ref_real* out, const ref_real* inp, int hs, int pos, double theta, int sign) {
    int half = hs / 2;
    for (int i = 0; i < half; i++) {
        double angle = pos * pow(theta, -2.0 * i / hs);
        double c = cos(angle), s = sign * sin(angle);
        double x1 = inp[i], x2 = inp[i + half];
        out[i] = (ref_real)(x1 * c - x2 * s);
        out[i + half] = (ref_real)(x2 * c + x1 * s);
    }
}

// RoPE on the first n_heads heads (hs channels each, hs even) of every token row of inp (B, T, stride),
// at the token's position t within its sequence (0-based); channels past n_heads * hs are not touched.
// The model passes its qkv rows, whose q heads are followed by the k heads: one call rotates both.
// out may be inp.
static inline void ref_rope_forward(ref_real* out, const ref_real* inp, int B, int T, int n_heads, int hs,
                                    int stride, double theta) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                size_t off = ((size_t)b * T + t) * stride + (size_t)h * hs;
                ref_rope_rotate(out + off, inp + off, hs, t, theta, 1);
            }
}

// dinp = R(t)^T dout per head (assigned, not accumulated: dinp may be dout itself). The rotation is
// orthogonal, so its transpose is the rotation by minus the angle.
static inline void ref_rope_backward(ref_real* dinp, const ref_real* dout, int B, int T, int n_heads, int hs,
                                     int stride, double theta) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                size_t off = ((size_t)b * T + t) * stride + (size_t)h * hs;
                ref_rope_rotate(dinp + off, dout + off, hs, t, theta, -1);
            }
}

// Grouped-query causal attention. qkv (B, T, (NH + 2 NKV) hs): per token, NH query heads, then NKV key
// heads, then NKV value heads, hs channels each (q and k already rotated in a Llama-style model). Query
// head h reads key/value head h / (NH / NKV); NKV == NH is GPT-2's multi-head attention, NKV == 1
// multi-query.
// att (B, NH, T, T) gets the softmax probabilities (0 above the diagonal), atty (B, T, NH hs) the
// probability-weighted values, heads side by side. Scores are scaled by 1/sqrt(hs).
static inline void ref_attention_forward(ref_real* atty, ref_real* att, const ref_real* qkv,
                                         int B, int T, int NH, int NKV, int hs) {
    int stride = (NH + 2 * NKV) * hs, group = NH / NKV;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                int kh = NH + h / group, vh = NH + NKV + h / group; // head slots within a row
                const ref_real* q = qkv + ((size_t)b * T + t) * stride + (size_t)h * hs;
                ref_real* a = att + (((size_t)b * NH + h) * T + t) * T;
                ref_real* y = atty + ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
                double maxv = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const ref_real* k = qkv + ((size_t)b * T + t2) * stride + (size_t)kh * hs;
                    a[t2] = (ref_real)(ref_dot(q, k, hs) * scale);
                    if (a[t2] > maxv) maxv = a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    double e = exp(a[t2] - maxv);
                    a[t2] = (ref_real)e;
                    sum += e;
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] = (ref_real)(a[t2] / sum);
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
                for (int i = 0; i < hs; i++) y[i] = 0;
                for (int t2 = 0; t2 <= t; t2++)
                    ref_axpy(y, a[t2], qkv + ((size_t)b * T + t2) * stride + (size_t)vh * hs, hs);
            }
}

// dqkv (B, T, (NH + 2 NKV) hs) += gradient from datty (B, T, NH hs). With p = att row and
// dp[t2] = dy · v[t2], the softmax backward is ds = p * (dp - sum(p * dp)); dp is recomputed in the
// second pass instead of being stored (T is small), so the function needs no scratch. The NH / NKV
// query heads of a group all add into their shared key and value heads.
static inline void ref_attention_backward(ref_real* dqkv, const ref_real* datty, const ref_real* qkv,
                                          const ref_real* att, int B, int T, int NH, int NKV, int hs) {
    int stride = (NH + 2 * NKV) * hs, group = NH / NKV;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                int kh = NH + h / group, vh = NH + NKV + h / group;
                size_t q_off = ((size_t)b * T + t) * stride + (size_t)h * hs;
                const ref_real* a = att + (((size_t)b * NH + h) * T + t) * T;
                const ref_real* dy = datty + ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
                double pdp = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t v_off = ((size_t)b * T + t2) * stride + (size_t)vh * hs;
                    pdp += a[t2] * ref_dot(dy, qkv + v_off, hs);
                    ref_axpy(dqkv + v_off, a[t2], dy, hs);
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t k_off = ((size_t)b * T + t2) * stride + (size_t)kh * hs;
                    size_t v_off = ((size_t)b * T + t2) * stride + (size_t)vh * hs;
                    double dp = ref_dot(dy, qkv + v_off, hs);
                    ref_real ds = (ref_real)(a[t2] * (dp - pdp) * scale);
                    ref_axpy(dqkv + q_off, ds, qkv + k_off, hs);
                    ref_axpy(dqkv + k_off, ds, qkv + q_off, hs);
                }
            }
}

// --- MLP activations --------------------------------------------------------------------------------

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define REF_GELU_K 0.7978845608028654 // sqrt(2 / pi)

static inline void ref_gelu_forward(ref_real* out, const ref_real* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (ref_real)(0.5 * x * (1.0 + tanh(REF_GELU_K * (x + 0.044715 * x * x * x))));
    }
}

// dinp = dout * gelu'(inp) (assigned, not accumulated: dinp may be dout itself)
static inline void ref_gelu_backward(ref_real* dinp, const ref_real* dout, const ref_real* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double th = tanh(REF_GELU_K * (x + 0.044715 * x * x * x));
        double du = REF_GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] = (ref_real)(dout[i] * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du));
    }
}

// SwiGLU: out (N, F) = silu(gate) * up, with gateup (N, 2F) holding gate in its first F columns and up
// in the last F (one matmul with the stacked weights gives both), silu(x) = x * sigmoid(x).
static inline void ref_swiglu_forward(ref_real* out, const ref_real* gateup, int N, int F) {
    for (int n = 0; n < N; n++) {
        const ref_real* g = gateup + (size_t)n * 2 * F;
        ref_real* o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) o[i] = (ref_real)(g[i] / (1.0 + exp(-(double)g[i])) * g[F + i]);
    }
}

// dgateup (N, 2F) from dout (N, F) (assigned, not accumulated): with s = sigmoid(gate),
//   dgate = dout * up * s (1 + gate (1 - s)),   dup = dout * gate * s.
static inline void ref_swiglu_backward(ref_real* dgateup, const ref_real* dout, const ref_real* gateup,
                                       int N, int F) {
    for (int n = 0; n < N; n++) {
        const ref_real* g = gateup + (size_t)n * 2 * F;
        const ref_real* d = dout + (size_t)n * F;
        ref_real* dg = dgateup + (size_t)n * 2 * F;
        for (int i = 0; i < F; i++) {
            double x = g[i], s = 1.0 / (1.0 + exp(-x));
            dg[i] = (ref_real)(d[i] * g[F + i] * s * (1.0 + x * (1.0 - s)));
            dg[F + i] = (ref_real)(d[i] * x * s);
        }
    }
}

// --- loss -------------------------------------------------------------------------------------------

// losses, lse (N,) from logits (N, Vp), softmax over the first V columns only. Rows with target -1 get
// loss 0 (their lse is still computed). Returns the number of counted rows.
static inline int ref_crossentropy_forward(ref_real* losses, ref_real* lse, const ref_real* logits,
                                           const int* targets, int N, int V, int Vp) {
    int counted = 0;
    for (int n = 0; n < N; n++) {
        const ref_real* z = logits + (size_t)n * Vp;
        double maxv = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            if (z[j] > maxv) maxv = z[j];
        for (int j = 0; j < V; j++) sum += exp(z[j] - maxv);
        double l = maxv + log(sum);
        lse[n] = (ref_real)l;
        losses[n] = targets[n] < 0 ? 0 : (ref_real)(l - z[targets[n]]);
        counted += targets[n] >= 0;
    }
    return counted;
}

// dlogits (N, Vp) = dloss * (softmax(logits[:V]) - onehot(target)) in counted rows; 0 in ignored rows
// and in the padded columns >= V (assigned, not accumulated).
static inline void ref_crossentropy_backward(ref_real* dlogits, const ref_real* logits, const ref_real* lse,
                                             const int* targets, double dloss, int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const ref_real* z = logits + (size_t)n * Vp;
        ref_real* dz = dlogits + (size_t)n * Vp;
        memset(dz, 0, (size_t)Vp * sizeof(ref_real));
        if (targets[n] < 0) continue;
        // the one-hot is subtracted in double: p[target] can be close to 1
        for (int j = 0; j < V; j++) dz[j] = (ref_real)(dloss * (exp(z[j] - lse[n]) - (j == targets[n])));
    }
}
