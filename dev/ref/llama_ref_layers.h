// llama_ref_layers.h: the layers that a Llama-style model adds to the CPU GPT-2 reference, one
// forward/backward pair each, in plain single-threaded C: token embedding, RMSNorm, rotary position
// embedding (RoPE), SwiGLU. Matmul, the grouped-query causal attention, cross-entropy, the residual add
// and the AdamW update come from gpt_ref_layers.h, included here. The model is dev/ref/llama_ref.h.
// Conventions as in gpt_ref_layers.h: argument order outputs, inputs, weights, sizes; backward functions
// ACCUMULATE (+=) into their outputs except where a comment says "assigned"; gpt_real is float, or
// double under GPT_REF_DOUBLE; transcendental functions and row statistics run in double either way.
// Compiles as C11 (gcc) and as C++17 (nvcc).
#pragma once
#include <math.h>
#include <stddef.h>
#include "gpt_ref_layers.h"

// out (N, C) = embed[inputs]: the only input layer (no position table: positions enter through RoPE)
static inline void llama_ref_embedding_forward(gpt_real* out, const int* inputs, const gpt_real* embed, int N, int C) {
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, embed + (size_t)inputs[n] * C, (size_t)C * sizeof(gpt_real));
}

static inline void llama_ref_embedding_backward(gpt_real* dembed, const gpt_real* dout, const int* inputs, int N, int C) {
    for (int n = 0; n < N; n++) gpt_ref_axpy(dembed + (size_t)inputs[n] * C, 1, dout + (size_t)n * C, C);
}

// out (N, C) = x * rstd * weight per row, rstd = 1 / sqrt(mean(x^2) + eps); rstd (N,) saved.
// Hugging Face's LlamaRMSNorm: no mean subtracted, no bias, eps inside the square root.
static inline void llama_ref_rmsnorm_forward(gpt_real* out, gpt_real* rstd, const gpt_real* inp,
                                             const gpt_real* weight, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const gpt_real* x = inp + (size_t)n * C;
        gpt_real* o = out + (size_t)n * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) o[i] = (gpt_real)(x[i] * s * weight[i]);
        rstd[n] = (gpt_real)s;
    }
}

// With xhat = x * rstd and g = dout * weight (LayerNorm's formula without the mean terms):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dweight += dout * xhat.
static inline void llama_ref_rmsnorm_backward(gpt_real* dinp, gpt_real* dweight, const gpt_real* dout,
                                              const gpt_real* inp, const gpt_real* rstd, const gpt_real* weight,
                                              int N, int C) {
    for (int n = 0; n < N; n++) {
        const gpt_real* x = inp + (size_t)n * C;
        const gpt_real* d = dout + (size_t)n * C;
        gpt_real* dx = dinp + (size_t)n * C;
        double s = rstd[n], gx_mean = 0;
        for (int i = 0; i < C; i++) gx_mean += (double)d[i] * weight[i] * x[i] * s;
        gx_mean /= C;
        for (int i = 0; i < C; i++) {
            double xhat = x[i] * s;
            dweight[i] += (gpt_real)(d[i] * xhat);
            dx[i] += (gpt_real)(s * ((double)d[i] * weight[i] - xhat * gx_mean));
        }
    }
}

// RoPE in Hugging Face's Llama convention (rotate_half): in a head of hs channels, channel i and
// channel i + hs/2 form a pair (i < hs/2), rotated by the angle pos * theta^(-2i/hs):
//   out[i] = x[i] cos - x[i + hs/2] sin,   out[i + hs/2] = x[i + hs/2] cos + x[i] sin.
// (Meta's original code pairs neighbours 2i, 2i+1 instead; its conversion to Hugging Face permutes the
// rows of q_proj and k_proj. With this convention, exported weights need no permutation.)
// Angles in double: Hugging Face computes inv_freq and pos * inv_freq in fp32, whose rounding shifts
// the angle by up to ~pos * 6e-8 rad; compare with it at tolerances that allow for that.
// sign -1 rotates by minus the angle: the transpose of the rotation, i.e. RoPE's backward.
// out may be inp.
static inline void llama_ref_rope_rotate(gpt_real* out, const gpt_real* inp, int hs, int pos, double theta, int sign) {
    int half = hs / 2;
    for (int i = 0; i < half; i++) {
        double angle = pos * pow(theta, -2.0 * i / hs);
        double c = cos(angle), s = sign * sin(angle);
        double x1 = inp[i], x2 = inp[i + half];
        out[i] = (gpt_real)(x1 * c - x2 * s);
        out[i + half] = (gpt_real)(x2 * c + x1 * s);
    }
}

// RoPE on the first n_heads heads (hs channels each, hs even) of every token row of inp (B, T, stride),
// at the token's position t within its sequence (0-based); channels past n_heads * hs are not touched.
// The model passes its qkv rows, whose q heads are followed by the k heads: one call rotates both.
// out may be inp.
static inline void llama_ref_rope_forward(gpt_real* out, const gpt_real* inp, int B, int T, int n_heads, int hs,
                                          int stride, double theta) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                size_t off = ((size_t)b * T + t) * stride + (size_t)h * hs;
                llama_ref_rope_rotate(out + off, inp + off, hs, t, theta, 1);
            }
}

// dinp = R(t)^T dout per head (assigned, not accumulated: dinp may be dout itself). The rotation is
// orthogonal, so its transpose is the rotation by minus the angle.
static inline void llama_ref_rope_backward(gpt_real* dinp, const gpt_real* dout, int B, int T, int n_heads, int hs,
                                           int stride, double theta) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                size_t off = ((size_t)b * T + t) * stride + (size_t)h * hs;
                llama_ref_rope_rotate(dinp + off, dout + off, hs, t, theta, -1);
            }
}

// SwiGLU: out (N, F) = silu(gate) * up, with gateup (N, 2F) holding gate in its first F columns and up
// in the last F (one matmul with the stacked weights gives both), silu(x) = x * sigmoid(x).
static inline void llama_ref_swiglu_forward(gpt_real* out, const gpt_real* gateup, int N, int F) {
    for (int n = 0; n < N; n++) {
        const gpt_real* g = gateup + (size_t)n * 2 * F;
        gpt_real* o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) o[i] = (gpt_real)(g[i] / (1.0 + exp(-(double)g[i])) * g[F + i]);
    }
}

// dgateup (N, 2F) from dout (N, F) (assigned, not accumulated): with s = sigmoid(gate),
//   dgate = dout * up * s (1 + gate (1 - s)),   dup = dout * gate * s.
static inline void llama_ref_swiglu_backward(gpt_real* dgateup, const gpt_real* dout, const gpt_real* gateup,
                                             int N, int F) {
    for (int n = 0; n < N; n++) {
        const gpt_real* g = gateup + (size_t)n * 2 * F;
        const gpt_real* d = dout + (size_t)n * F;
        gpt_real* dg = dgateup + (size_t)n * 2 * F;
        for (int i = 0; i < F; i++) {
            double x = g[i], s = 1.0 / (1.0 + exp(-x));
            dg[i] = (gpt_real)(d[i] * g[F + i] * s * (1.0 + x * (1.0 - s)));
            dg[F + i] = (gpt_real)(d[i] * x * s);
        }
    }
}
