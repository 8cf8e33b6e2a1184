// test_llama_ref.c: CPU tests of the Llama-style reference model (dev/ref/llama_ref.h), built in double;
// its layers alone are test_llama_ref_layers.c. Checks: the backward against central finite differences
// of the forward loss for every element of every parameter tensor (reported per Hugging Face tensor:
// wqkv as q_proj, k_proj, v_proj, w_gateup as gate_proj, up_proj), at NKV = 2, 1 and NH; padded
// vocabulary rows of embed and lm_head never count and get exactly zero gradient; causality; the loss
// at init is about log(V); AdamW steps on a fixed batch lower the loss, and weight decay touches the
// weight matrices only; all targets ignored; and the golden values of llama_ref_fixture.h, which
// test_llama_ref_float compares the float build against.
#define GPT_REF_DOUBLE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../ref/llama_ref.h"
#include "../ref/llama_ref_fixture.h"
#include "finite_diff.h"
#include "ref_model_checks.h"
#include "testing.h"

// The tiny model: two layers, four query heads of hs 4, odd F, V not a multiple of anything, T < maxT.
// theta 100 makes the second rotary pair turn by 0.1 rad per position (at 1e4 it would barely move).
#define TINY_B 2
#define TINY_T 5

static llama_ref_config tiny_config(int num_kv_heads) {
    llama_ref_config c;
    c.max_seq_len = 8;
    c.vocab_size = 37;
    c.padded_vocab_size = 48;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = num_kv_heads;
    c.channels = 16;
    c.ffn_hidden = 19;
    c.rope_theta = 100;
    c.rms_norm_eps = 1e-5;
    return c;
}

// Parameters of order one instead of 0.02: at init the tiny model is nearly linear (softmaxes flat,
// SiLU near x/2), which would hide mistakes in those formulas, and larger gradients stand further above
// the round-off of the finite differences. RMSNorm weights are 1 + noise; the padded rows are random too
// (they must still not count).
static void randomize_params(llama_ref_model* m, uint64_t seed) {
    size_t sizes[LLAMA_REF_NUM_TENSORS], off = 0;
    llama_ref_tensor_sizes(sizes, &m->config);
    uint64_t rng = seed;
    for (int i = 0; i < LLAMA_REF_NUM_TENSORS; i++) {
        fill_normal(m->params_memory + off, sizes[i], llama_ref_tensor_is_norm(i) ? 1.0 : 0.0, 0.3, &rng);
        off += sizes[i];
    }
}

typedef struct {
    llama_ref_model* m;
    const int* inputs;
    const int* targets;
} model_case;

static double model_loss(void* ctx) {
    model_case* k = (model_case*)ctx;
    return llama_ref_forward(k->m, k->inputs, k->targets, TINY_B, TINY_T);
}

// The Hugging Face tensor that element j of tensor i belongs to, as an index into the names below:
// wqkv stacks q_proj, k_proj, v_proj and w_gateup stacks gate_proj, up_proj in every layer's rows.
static int hf_part(int i, size_t j, const llama_ref_config* c) {
    size_t C = (size_t)c->channels, hs = C / c->num_heads, F = (size_t)c->ffn_hidden;
    if (i == LLAMA_REF_WQKV) {
        size_t row = (j / C) % (size_t)llama_ref_qkv_dim(c);
        return row < c->num_heads * hs ? 0 : row < (size_t)(c->num_heads + c->num_kv_heads) * hs ? 1 : 2;
    }
    if (i == LLAMA_REF_WGATEUP) return (j / C) % (2 * F) < F ? 0 : 1;
    return 0;
}

static void test_finite_differences(int num_kv_heads) {
    static const char* const wqkv_parts[3] = {"wqkv q_proj", "wqkv k_proj", "wqkv v_proj"};
    static const char* const gateup_parts[3] = {"w_gateup gate_proj", "w_gateup up_proj", ""};
    llama_ref_config c = tiny_config(num_kv_heads);
    llama_ref_model m;
    llama_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 7 + (uint64_t)num_kv_heads);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 11);
    double loss = llama_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    llama_ref_backward(&m);
    double* grads = (double*)malloc_check(m.num_params * sizeof(double));
    memcpy(grads, m.grads_memory, m.num_params * sizeof(double));
    printf("model vs finite differences, NH %d NKV %d: loss %.6f, h %g, error = |a - fd| / max(|a|, |fd|, %g), "
           "tolerance %g\n", c.num_heads, num_kv_heads, loss, FD_H, FD_FLOOR, FD_TOL);
    model_case k;
    k.m = &m;
    k.inputs = inputs;
    k.targets = targets;
    size_t sizes[LLAMA_REF_NUM_TENSORS], off = 0;
    llama_ref_tensor_sizes(sizes, &c);
    for (int i = 0; i < LLAMA_REF_NUM_TENSORS; i++) {
        fd_stats s[3];
        size_t n[3] = {0, 0, 0};
        memset(s, 0, sizeof(s));
        for (size_t j = 0; j < sizes[i]; j++) {
            int p = hf_part(i, j, &c);
            fd_element(&s[p], m.params_memory + off, j, grads[off + j], model_loss, &k);
            n[p]++;
        }
        for (int p = 0; p < 3; p++) {
            if (n[p] == 0) continue;
            const char* name = i == LLAMA_REF_WQKV ? wqkv_parts[p] : i == LLAMA_REF_WGATEUP ? gateup_parts[p]
                             : llama_ref_tensor_name(i);
            fd_report(name, &s[p], n[p]);
        }
        off += sizes[i];
    }
    free(grads);
    llama_ref_free(&m);
}

// Padded rows embed[V:Vp] and lm_head[V:Vp] (random here) get exactly zero gradient, and changing them
// changes neither the loss nor the first V logits, bit for bit.
static void test_padded_rows(void) {
    llama_ref_config c = tiny_config(2);
    llama_ref_model m;
    llama_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 8);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 12);
    int n = TINY_B * TINY_T, V = c.vocab_size, Vp = c.padded_vocab_size, C = c.channels;
    double loss = llama_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    llama_ref_backward(&m);
    int nonzero = 0;
    for (size_t j = (size_t)V * C; j < (size_t)Vp * C; j++) nonzero += (m.grads.embed[j] != 0) + (m.grads.lm_head[j] != 0);
    EXPECT(nonzero == 0, "padded rows of embed and lm_head: %d gradient entries are not exactly 0", nonzero);
    double* logits = (double*)malloc_check((size_t)n * Vp * sizeof(double));
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    for (size_t j = (size_t)V * C; j < (size_t)Vp * C; j++) {
        m.params.embed[j] *= -7;
        m.params.lm_head[j] *= -7;
    }
    double loss2 = llama_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_expect_padded_rows_inert(nonzero, loss, loss2, logits, m.acts.logits, n, V, Vp);
    free(logits);
    llama_ref_free(&m);
}

// Changing token t0 of row 0 leaves the logits of its earlier positions and of row 1 bitwise unchanged
// and changes those at t0.
static void test_causality(void) {
    llama_ref_config c = tiny_config(2);
    llama_ref_model m;
    llama_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 9);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 13);
    int n = TINY_B * TINY_T, Vp = c.padded_vocab_size, t0 = 3;
    llama_ref_forward(&m, inputs, NULL, TINY_B, TINY_T);
    double* logits = (double*)malloc_check((size_t)n * Vp * sizeof(double));
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    inputs[t0] = (inputs[t0] + 1) % c.vocab_size;
    llama_ref_forward(&m, inputs, NULL, TINY_B, TINY_T);
    int changed[3];
    ref_expect_causal(logits, m.acts.logits, n, Vp, TINY_T, t0, changed);
    printf("causality: %d earlier / %d own / %d other-row logits changed\n", changed[0], changed[1], changed[2]);
    free(logits);
    llama_ref_free(&m);
}

// At init the final norm's output has RMS ~1 and lm_head ~ N(0, 0.02), so each logit has sigma
// ~ 0.02 sqrt(C) = 0.08: lse ~ log(V) + sigma^2/2 = log(V) + 0.003, and the mean target logit over
// 16 x 8 positions scatters by ~0.01. The band 0.05 covers that; a wrong normalization misses it by far.
static void test_init_loss(void) {
    llama_ref_config c = tiny_config(2);
    int B = 16, T = c.max_seq_len, n = B * T;
    llama_ref_model m;
    llama_ref_build(&m, &c, B, T);
    llama_ref_init_params(&m, 42);
    int* inputs = (int*)malloc_check((size_t)n * sizeof(int));
    int* targets = (int*)malloc_check((size_t)n * sizeof(int));
    ref_random_tokens(inputs, targets, n, c.vocab_size, 14);
    ref_expect_init_loss(llama_ref_forward(&m, inputs, targets, B, T), c.vocab_size);
    int pad_zero = 1;
    for (size_t j = (size_t)c.vocab_size * c.channels; j < (size_t)c.padded_vocab_size * c.channels; j++)
        pad_zero &= m.params.embed[j] == 0 && m.params.lm_head[j] == 0;
    EXPECT(pad_zero, "init: padded rows of embed or lm_head are not 0");
    EXPECT(m.params.attn_norm[0] == 1 && m.params.final_norm[c.channels - 1] == 1, "init: RMSNorm weights are not 1");
    free(inputs);
    free(targets);
    llama_ref_free(&m);
}

// Ten AdamW steps (lr 1e-2, wd 0.1) on one fixed batch: the loss goes down at every step and ends
// clearly lower. Then, with zero gradients, a step only decays the weight matrices, by the factor
// (1 - lr wd), and leaves the RMSNorm weights untouched.
static void test_adamw(void) {
    llama_ref_config c = tiny_config(2);
    llama_ref_model m;
    llama_ref_build(&m, &c, TINY_B, TINY_T);
    llama_ref_init_params(&m, 43);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 15);
    double losses[10];
    for (int step = 1; step <= 10; step++) {
        losses[step - 1] = llama_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
        llama_ref_backward(&m);
        llama_ref_adamw_step(&m, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
    }
    ref_expect_loss_descent(losses, 10);

    double* before = (double*)malloc_check(m.num_params * sizeof(double));
    llama_ref_init_params(&m, 44); // clears m and v: a fresh optimizer
    randomize_params(&m, 44);      // RMSNorm weights other than 1, so that a decay would show
    memcpy(before, m.params_memory, m.num_params * sizeof(double));
    llama_ref_zero_grad(&m);
    double lr = 1e-2, wd = 0.1;
    llama_ref_adamw_step(&m, lr, 0.9, 0.95, 1e-8, wd, 1);
    size_t sizes[LLAMA_REF_NUM_TENSORS];
    llama_ref_tensor_sizes(sizes, &c);
    ref_expect_decay_only(m.params_memory, before, sizes, LLAMA_REF_NUM_TENSORS, llama_ref_tensor_decays,
                          llama_ref_tensor_name, lr, wd);
    free(before);
    llama_ref_free(&m);
}

// Every target -1: loss 0 and every gradient exactly 0.
static void test_all_ignored(void) {
    llama_ref_config c = tiny_config(1);
    llama_ref_model m;
    llama_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 11);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 17);
    for (int i = 0; i < TINY_B * TINY_T; i++) targets[i] = -1;
    double loss = llama_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    llama_ref_backward(&m);
    EXPECT(loss == 0 && llama_ref_grad_norm(&m) == 0, "all targets ignored: loss %g, grad norm %g (want 0, 0)",
           loss, llama_ref_grad_norm(&m));
    llama_ref_free(&m);
}

static void test_fixture(void) {
    double loss, norms[LLAMA_REF_NUM_TENSORS], max_rel = 0;
    llama_fixture_run(&loss, norms);
    printf("fixture: loss %.17g\nfixture: grad norms", loss);
    for (int i = 0; i < LLAMA_REF_NUM_TENSORS; i++) {
        printf(" %.17g%s", norms[i], i + 1 < LLAMA_REF_NUM_TENSORS ? "," : "\n");
        max_rel = fmax(max_rel, fabs(norms[i] - llama_fixture_grad_norms[i]) / llama_fixture_grad_norms[i]);
    }
    EXPECT(fabs(loss - LLAMA_FIXTURE_LOSS) <= 1e-10 * LLAMA_FIXTURE_LOSS && max_rel <= 1e-10,
           "fixture: loss %.17g (golden %.17g), grad norms up to %.3e relative from the golden values in "
           "llama_ref_fixture.h; if the model or init changed on purpose, paste the new values there",
           loss, LLAMA_FIXTURE_LOSS, max_rel);
}

int main(void) {
    test_finite_differences(2);
    test_finite_differences(1);
    test_finite_differences(4);
    test_padded_rows();
    test_causality();
    test_init_loss();
    test_adamw();
    test_all_ignored();
    test_fixture();
    return test_summary("test_llama_ref");
}
