// test_ref_layers.c: CPU tests of the layers of the reference model (dev/ref/ref_layers.h), every
// family's, built in double; the whole model is test_model_ref.c. Checks: each backward (RMSNorm and
// LayerNorm input and weight, LayerNorm bias, RoPE, SwiGLU, GELU, attention with NKV = 2, 1 and NH)
// against central finite differences of sum(out * R), at small awkward sizes (5 x 7 rows, odd half
// head, odd hs, untouched channels after the rotated heads); the RMSNorm and SwiGLU forwards against
// their definitions on a few numbers; RoPE against the rotate_half definition on one-hot heads at hs
// 64, the identity at position 0, pair norms kept, scores that depend on relative position only; GQA
// at NKV = 2 and 1 of NH = 4 equal to multi-head attention (NKV = NH) with the kv heads repeated,
// forward and backward. (The LayerNorm and GELU forwards are checked through the model, by its
// fixture's golden values.)
#define REF_DOUBLE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../../../llmc/core/check.h"
#include "../../ref/ref_layers.h"
#include "../finite_diff.h"
#include "../testing.h"

// One layer at small, awkward sizes; the scalar loss is sum(out * R) for a fixed random R, so that the
// backward gets dout = R. Inputs are N(0, 1), norm weights 1 + N(0, 0.3), LayerNorm's bias N(0, 0.3).
enum { LAYER_RMSNORM, LAYER_ROPE, LAYER_SWIGLU, LAYER_ATTENTION, LAYER_LAYERNORM, LAYER_GELU };

typedef struct {
    int layer, B, T, C, NH, NKV, hs, stride;
    double theta;
    double *inp, *weight, *bias, *out, *aux, *mean, *R; // aux: rstd or att; mean: LayerNorm's
    size_t n_inp, n_out;
} layer_case;

static void layer_forward(layer_case* k) {
    int BT = k->B * k->T;
    if (k->layer == LAYER_RMSNORM) ref_rmsnorm_forward(k->out, k->aux, k->inp, k->weight, BT, k->C, 1e-5);
    if (k->layer == LAYER_ROPE) ref_rope_forward(k->out, k->inp, k->B, k->T, k->NH, k->hs, k->stride, k->theta);
    if (k->layer == LAYER_SWIGLU) ref_swiglu_forward(k->out, k->inp, BT, k->C);
    if (k->layer == LAYER_ATTENTION) ref_attention_forward(k->out, k->aux, k->inp, k->B, k->T, k->NH, k->NKV, k->hs);
    if (k->layer == LAYER_LAYERNORM)
        ref_layernorm_forward(k->out, k->mean, k->aux, k->inp, k->weight, k->bias, BT, k->C);
    if (k->layer == LAYER_GELU) ref_gelu_forward(k->out, k->inp, (size_t)BT * k->C);
}

static double layer_loss(void* ctx) {
    layer_case* k = (layer_case*)ctx;
    layer_forward(k);
    double s = 0;
    for (size_t i = 0; i < k->n_out; i++) s += k->out[i] * k->R[i];
    return s;
}

// C is the row width for the norms and GELU, and F for SwiGLU; RoPE rotates NH heads of rows of width stride.
static void test_layer(const char* name, int layer, int B, int T, int C, int NH, int NKV, int hs, int stride) {
    layer_case k;
    memset(&k, 0, sizeof(k));
    k.layer = layer; k.B = B; k.T = T; k.C = C; k.NH = NH; k.NKV = NKV; k.hs = hs; k.stride = stride;
    k.theta = 10.0; // angles of 0.2 .. 4 rad at these positions, not nearly the identity
    size_t BT = (size_t)B * T;
    k.n_inp = layer == LAYER_ROPE ? BT * stride : layer == LAYER_SWIGLU ? BT * 2 * C
            : layer == LAYER_ATTENTION ? BT * (NH + 2 * NKV) * hs : BT * C;
    k.n_out = layer == LAYER_ROPE ? BT * stride : layer == LAYER_ATTENTION ? BT * NH * hs : BT * C;
    k.inp = (double*)malloc_check(k.n_inp * sizeof(double));
    k.out = (double*)calloc_check(k.n_out, sizeof(double));
    k.R = (double*)malloc_check(k.n_out * sizeof(double));
    k.weight = (double*)malloc_check((size_t)C * sizeof(double));
    k.bias = (double*)malloc_check((size_t)C * sizeof(double));
    k.mean = (double*)malloc_check(BT * sizeof(double));
    k.aux = (double*)malloc_check(BT * (NH > 0 ? NH * T : 1) * sizeof(double));
    double* dinp = (double*)calloc_check(k.n_inp, sizeof(double));
    double* dweight = (double*)calloc_check((size_t)C, sizeof(double));
    double* dbias = (double*)calloc_check((size_t)C, sizeof(double));
    uint64_t rng = 1000 + (uint64_t)layer * 10 + (uint64_t)NKV;
    fill_normal(k.inp, k.n_inp, 0, 1, &rng);
    fill_normal(k.R, k.n_out, 0, 1, &rng);
    fill_normal(k.weight, (size_t)C, 1, 0.3, &rng);
    if (layer == LAYER_LAYERNORM) fill_normal(k.bias, (size_t)C, 0, 0.3, &rng);
    layer_forward(&k);
    if (layer == LAYER_RMSNORM) ref_rmsnorm_backward(dinp, dweight, k.R, k.inp, k.aux, k.weight, (int)BT, C);
    if (layer == LAYER_ROPE) ref_rope_backward(dinp, k.R, B, T, NH, hs, stride, k.theta);
    if (layer == LAYER_SWIGLU) ref_swiglu_backward(dinp, k.R, k.inp, (int)BT, C);
    if (layer == LAYER_ATTENTION) ref_attention_backward(dinp, k.R, k.inp, k.aux, B, T, NH, NKV, hs);
    if (layer == LAYER_LAYERNORM)
        ref_layernorm_backward(dinp, dweight, dbias, k.R, k.inp, k.mean, k.aux, k.weight, (int)BT, C);
    if (layer == LAYER_GELU) ref_gelu_backward(dinp, k.R, k.inp, BT * C);
    fd_check_array(name, k.inp, dinp, k.n_inp, FD_FLOOR, layer_loss, &k);
    if (layer == LAYER_RMSNORM)
        fd_check_array("rmsnorm weight", k.weight, dweight, (size_t)C, FD_FLOOR, layer_loss, &k);
    if (layer == LAYER_LAYERNORM) {
        fd_check_array("layernorm weight", k.weight, dweight, (size_t)C, FD_FLOOR, layer_loss, &k);
        fd_check_array("layernorm bias", k.bias, dbias, (size_t)C, FD_FLOOR, layer_loss, &k);
    }
    free(k.inp); free(k.out); free(k.R); free(k.weight); free(k.bias); free(k.aux); free(k.mean);
    free(dinp); free(dweight); free(dbias);
}

static void test_layers(void) {
    printf("layers vs finite differences: h %g, error = |a - fd| / max(|a|, |fd|, %g), tolerance %g\n",
           FD_H, FD_FLOOR, FD_TOL);
    test_layer("rmsnorm input (5 x 7)", LAYER_RMSNORM, 1, 5, 7, 0, 0, 0, 0);
    test_layer("rope (3 heads of 6 + 2)", LAYER_ROPE, 2, 5, 0, 3, 0, 6, 20); // odd half, untouched tail
    test_layer("swiglu (10 x 2*7)", LAYER_SWIGLU, 2, 5, 7, 0, 0, 0, 0);
    test_layer("attention NH 4, NKV 2", LAYER_ATTENTION, 2, 5, 0, 4, 2, 3, 0);
    test_layer("attention NH 4, NKV 1", LAYER_ATTENTION, 2, 5, 0, 4, 1, 3, 0);
    test_layer("attention NH 4, NKV 4", LAYER_ATTENTION, 2, 5, 0, 4, 4, 3, 0);
    test_layer("layernorm input (5 x 7)", LAYER_LAYERNORM, 1, 5, 7, 0, 0, 0, 0);
    test_layer("gelu (10 x 7)", LAYER_GELU, 2, 5, 7, 0, 0, 0, 0);
}

// RMSNorm and SwiGLU forwards against their definitions, written out here on a few numbers (the finite
// differences check only that each backward fits its forward): Hugging Face's RMSNorm divides by
// sqrt(mean(x^2) + eps), eps inside the root, then multiplies by the weight; SwiGLU is
// gate / (1 + exp(-gate)) * up. Tolerance 1e-15 on values of order 1 (a few roundings).
static void test_forward_definitions(void) {
    double x[8] = {1, -2, 3, -4, 0.5, 0, 0, 0}, w[4] = {1, 0.5, 2, -1}, y[8], rstd[2], max_err = 0;
    ref_rmsnorm_forward(y, rstd, x, w, 2, 4, 0.1);
    double r0 = 1 / sqrt((1 + 4 + 9 + 16) / 4.0 + 0.1), r1 = 1 / sqrt(0.25 / 4 + 0.1);
    for (int i = 0; i < 4; i++) max_err = fmax(max_err, fabs(y[i] - x[i] * r0 * w[i]));
    for (int i = 0; i < 4; i++) max_err = fmax(max_err, fabs(y[4 + i] - x[4 + i] * r1 * w[i]));
    max_err = fmax(max_err, fmax(fabs(rstd[0] - r0), fabs(rstd[1] - r1)));
    printf("rmsnorm: forward vs x / sqrt(mean(x^2) + eps) * w: max err %.2e (tol 1e-15)\n", max_err);
    EXPECT(max_err <= 1e-15, "rmsnorm: forward differs from x / sqrt(mean(x^2) + eps) * w by %.3e", max_err);
    double gu[6] = {0, 1, -3, 2, -1, 0.5}, out[3]; // one row of F = 3: gate (0, 1, -3), up (2, -1, 0.5)
    ref_swiglu_forward(out, gu, 1, 3);
    max_err = 0;
    for (int i = 0; i < 3; i++) max_err = fmax(max_err, fabs(out[i] - gu[i] / (1 + exp(-gu[i])) * gu[3 + i]));
    printf("swiglu: forward vs gate / (1 + exp(-gate)) * up: max err %.2e (tol 1e-15)\n", max_err);
    EXPECT(max_err <= 1e-15, "swiglu: forward differs from silu(gate) * up by %.3e", max_err);
}

// RoPE against its definition, on one-hot heads at a real size (hs 64, Llama 3's theta 5e5): e_i at
// position t goes to cos(a) e_i + sin(a) e_(i+hs/2) and e_(i+hs/2) to -sin(a) e_i + cos(a) e_(i+hs/2), with
// a = t theta^(-2i/hs), nothing else. Then, on random heads: position 0 is the identity bit for bit;
// each pair keeps its norm; q·k after RoPE at positions (p, p') equals that at (p + s, p' + s).
static void test_rope_properties(void) {
    int hs = 64, half = 32, t = 3;
    double theta = 500000, x[64], y[64], max_err = 0;
    for (int i = 0; i < hs; i++) {
        memset(x, 0, sizeof(x));
        x[i] = 1;
        ref_rope_rotate(y, x, hs, t, theta, 1);
        int pair = i % half, partner = i < half ? i + half : i - half;
        double a = t * pow(theta, -2.0 * pair / hs);
        for (int j = 0; j < hs; j++) {
            double want = j == i ? cos(a) : j == partner ? (i < half ? sin(a) : -sin(a)) : 0;
            max_err = fmax(max_err, fabs(y[j] - want));
        }
    }
    printf("rope: one-hot heads vs the rotate_half definition (hs 64, theta 5e5): max err %.2e (tol 1e-15)\n", max_err);
    EXPECT(max_err <= 1e-15, "rope: one-hot heads differ from Hugging Face's rotate_half rotation by %.3e", max_err);

    int B = 2, T = 6, NH = 3, stride = NH * hs;
    size_t n = (size_t)B * T * stride;
    double* inp = (double*)malloc_check(n * sizeof(double));
    double* out = (double*)malloc_check(n * sizeof(double));
    uint64_t rng = 21;
    fill_normal(inp, n, 0, 1, &rng);
    ref_rope_forward(out, inp, B, T, NH, hs, stride, theta);
    int pos0_diff = 0;
    double norm_err = 0;
    for (int b = 0; b < B; b++)
        for (int tt = 0; tt < T; tt++)
            for (int h = 0; h < NH; h++) {
                size_t o = ((size_t)b * T + tt) * stride + (size_t)h * hs;
                for (int i = 0; i < half; i++) {
                    if (tt == 0) pos0_diff += out[o + i] != inp[o + i] || out[o + i + half] != inp[o + i + half];
                    double n0 = inp[o + i] * inp[o + i] + inp[o + i + half] * inp[o + i + half];
                    double n1 = out[o + i] * out[o + i] + out[o + i + half] * out[o + i + half];
                    norm_err = fmax(norm_err, fabs(n1 - n0) / n0);
                }
            }
    printf("rope: %d channels changed at position 0; pair norms kept to %.2e (tol 1e-14)\n", pos0_diff, norm_err);
    EXPECT(pos0_diff == 0, "rope: position 0 changed %d channels (must be the identity, bit for bit)", pos0_diff);
    EXPECT(norm_err <= 1e-14, "rope: a pair's squared norm changed by %.3e (relative)", norm_err);

    // relative position: shifts of 1, 7 and 1000 (angles up to ~2000 rad: cos/sin keep ~1e-13 there)
    double q[64], k[64], rq[64], rk[64], rel_err = 0;
    fill_normal(q, 64, 0, 1, &rng);
    fill_normal(k, 64, 0, 1, &rng);
    const int shifts[3] = {1, 7, 1000};
    for (int p = 0; p < 5; p++)
        for (int p2 = 0; p2 <= p; p2++) {
            ref_rope_rotate(rq, q, hs, p, theta, 1);
            ref_rope_rotate(rk, k, hs, p2, theta, 1);
            double base = ref_dot(rq, rk, hs);
            for (int s = 0; s < 3; s++) {
                ref_rope_rotate(rq, q, hs, p + shifts[s], theta, 1);
                ref_rope_rotate(rk, k, hs, p2 + shifts[s], theta, 1);
                rel_err = fmax(rel_err, fabs(ref_dot(rq, rk, hs) - base) / hs);
            }
        }
    printf("rope: q·k at (p, p') vs (p + s, p' + s), s = 1, 7, 1000: max diff / hs %.2e (tol 1e-12)\n", rel_err);
    EXPECT(rel_err <= 1e-12, "rope: scores depend on absolute position: q·k changed by %.3e x hs under a shift", rel_err);
    free(inp);
    free(out);
}

// GQA at NKV < NH against multi-head attention (the same function at NKV = NH, GPT-2's attention) on
// qkv whose kv heads are repeated NH/NKV times: same probabilities and outputs; the query gradient is
// the same, and each shared kv head's gradient is the sum of its copies'. The tolerance 1e-13 (on
// values of order 1) allows for the reordered sums. (NKV = NH is not checked: it would compare the
// function with itself.)
static void test_gqa_vs_mha(int NKV) {
    int B = 2, T = 5, NH = 4, hs = 3, C = NH * hs, G = NH / NKV, QKV = (NH + 2 * NKV) * hs;
    size_t BT = (size_t)B * T;
    double* qkv = (double*)malloc_check(BT * QKV * sizeof(double));
    double* qkv3 = (double*)malloc_check(BT * 3 * C * sizeof(double));
    double* dy = (double*)malloc_check(BT * C * sizeof(double));
    double* y = (double*)malloc_check(BT * C * sizeof(double));
    double* y3 = (double*)malloc_check(BT * C * sizeof(double));
    double* att = (double*)malloc_check(BT * NH * T * sizeof(double));
    double* att3 = (double*)malloc_check(BT * NH * T * sizeof(double));
    double* dqkv = (double*)calloc_check(BT * QKV, sizeof(double));
    double* dqkv3 = (double*)calloc_check(BT * 3 * C, sizeof(double));
    double* want = (double*)calloc_check(BT * QKV, sizeof(double));
    uint64_t rng = 30 + (uint64_t)NKV;
    fill_normal(qkv, BT * QKV, 0, 1, &rng);
    fill_normal(dy, BT * C, 0, 1, &rng);
    for (size_t r = 0; r < BT; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                qkv3[r * 3 * C + h * hs + i] = qkv[r * QKV + h * hs + i];
                qkv3[r * 3 * C + C + h * hs + i] = qkv[r * QKV + (NH + h / G) * hs + i];
                qkv3[r * 3 * C + 2 * C + h * hs + i] = qkv[r * QKV + (NH + NKV + h / G) * hs + i];
            }
    ref_attention_forward(y, att, qkv, B, T, NH, NKV, hs);
    ref_attention_forward(y3, att3, qkv3, B, T, NH, NH, hs);
    ref_attention_backward(dqkv, dy, qkv, att, B, T, NH, NKV, hs);
    ref_attention_backward(dqkv3, dy, qkv3, att3, B, T, NH, NH, hs);
    for (size_t r = 0; r < BT; r++) // fold the repeated heads' gradients back onto the shared ones
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                want[r * QKV + h * hs + i] = dqkv3[r * 3 * C + h * hs + i];
                want[r * QKV + (NH + h / G) * hs + i] += dqkv3[r * 3 * C + C + h * hs + i];
                want[r * QKV + (NH + NKV + h / G) * hs + i] += dqkv3[r * 3 * C + 2 * C + h * hs + i];
            }
    double e_y = max_abs_diff(y, y3, BT * C), e_att = max_abs_diff(att, att3, BT * NH * T);
    double e_d = max_abs_diff(dqkv, want, BT * QKV);
    printf("gqa NH %d NKV %d vs multi-head with repeated kv heads: out %.2e, probs %.2e, grads %.2e (tol 1e-13)\n",
           NH, NKV, e_y, e_att, e_d);
    EXPECT(e_y <= 1e-13 && e_att <= 1e-13, "gqa NKV %d: forward differs from multi-head (out %.3e, probs %.3e)",
           NKV, e_y, e_att);
    EXPECT(e_d <= 1e-13, "gqa NKV %d: backward differs from multi-head with summed kv gradients by %.3e", NKV, e_d);
    free(qkv); free(qkv3); free(dy); free(y); free(y3); free(att); free(att3); free(dqkv); free(dqkv3); free(want);
}

int main(void) {
    test_layers();
    test_forward_definitions();
    test_rope_properties();
    test_gqa_vs_mha(2);
    test_gqa_vs_mha(1);
    return test_summary("test_ref_layers");
}
