// test_gpt_ref.c: CPU tests of the GPT-2 reference (dev/ref/gpt_ref.h, gpt_ref_layers.h), built in double.
// Checks: the backward against central finite differences of the forward loss for every element of
// every parameter tensor; padded vocabulary rows never count and get exactly zero gradient; causality
// (a later token does not change earlier logits, and a shorter T gives the same logits); the loss at
// init is about log(V); AdamW steps on a fixed batch lower the loss, weight decay touches only the
// 2-D weights, one step matches the formula; gradient clipping; all targets ignored; and the golden
// values of gpt_ref_fixture.h, which test_gpt_ref_float compares the float build against.
#define GPT_REF_DOUBLE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../ref/gpt_ref.h"
#include "../ref/gpt_ref_fixture.h"

// Central differences, h = 1e-5: truncation h^2/6 f''' ~ 1e-11, round-off ~ 1e-16 * loss / h ~ 1e-10.
// An element's error is |analytic - fd| / max(|analytic|, |fd|, 1e-3): relative where the gradient is
// of normal size (up to ~0.5 here), absolute / 1e-3 for tiny ones, whose fd is mostly that 1e-10 noise
// (so their error stays below ~3e-7). A wrong formula gives errors of order 1e-2 .. 1.
#define FD_FLOOR 1e-3
#include "finite_diff.h"
#include "ref_model_checks.h"
#include "testing.h"

// The tiny model: two layers, two heads, V not a multiple of anything, T < maxT (unused wpe rows).
#define TINY_B 2
#define TINY_T 5

static gpt_ref_config tiny_config(void) {
    gpt_ref_config c;
    c.max_seq_len = 8;
    c.vocab_size = 37;
    c.padded_vocab_size = 48;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 16;
    return c;
}

// Parameters of order one instead of GPT-2's 0.02: at init the tiny model is nearly linear (softmaxes
// flat, GELU near its linear part), which would hide mistakes in those formulas, and larger gradients
// stand further above the round-off of the finite differences. LayerNorm weights are 1 + noise and
// every bias is non-zero so that no term drops out; the padded rows of wte are random too (they must
// still not count).
static void randomize_params(gpt_ref_model* m, uint64_t seed) {
    size_t sizes[GPT_REF_NUM_TENSORS], off = 0;
    gpt_ref_tensor_sizes(sizes, &m->config);
    uint64_t rng = seed;
    for (int i = 0; i < GPT_REF_NUM_TENSORS; i++) {
        fill_normal(m->params_memory + off, sizes[i], gpt_ref_tensor_is_ln_weight(i) ? 1.0 : 0.0, 0.3, &rng);
        off += sizes[i];
    }
}

typedef struct {
    gpt_ref_model* m;
    const int* inputs;
    const int* targets;
} model_case;

static double model_loss(void* ctx) {
    model_case* k = (model_case*)ctx;
    return gpt_ref_forward(k->m, k->inputs, k->targets, TINY_B, TINY_T);
}

static void test_finite_differences(void) {
    gpt_ref_config c = tiny_config();
    gpt_ref_model m;
    gpt_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 7);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 11);
    double loss = gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    gpt_ref_backward(&m);
    double* grads = (double*)malloc_check(m.num_params * sizeof(double));
    memcpy(grads, m.grads_memory, m.num_params * sizeof(double));
    printf("finite differences: loss %.6f, h %g, error = |a - fd| / max(|a|, |fd|, %g), tolerance %g\n",
           loss, FD_H, FD_FLOOR, FD_TOL);
    model_case k;
    k.m = &m;
    k.inputs = inputs;
    k.targets = targets;
    size_t sizes[GPT_REF_NUM_TENSORS], off = 0;
    gpt_ref_tensor_sizes(sizes, &c);
    for (int i = 0; i < GPT_REF_NUM_TENSORS; i++) {
        fd_check_array(gpt_ref_tensor_name(i), m.params_memory + off, grads + off, sizes[i], model_loss, &k);
        off += sizes[i];
    }
    free(grads);
    gpt_ref_free(&m);
}

// Padded rows wte[V:Vp] (random here) get exactly zero gradient, and changing them changes neither the
// loss nor the first V logits, bit for bit.
static void test_padded_rows(void) {
    gpt_ref_config c = tiny_config();
    gpt_ref_model m;
    gpt_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 8);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 12);
    int n = TINY_B * TINY_T, V = c.vocab_size, Vp = c.padded_vocab_size, C = c.channels;
    double loss = gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    gpt_ref_backward(&m);
    int nonzero = 0;
    for (size_t j = (size_t)V * C; j < (size_t)Vp * C; j++) nonzero += m.grads.wte[j] != 0;
    EXPECT(nonzero == 0, "padded rows wte[V:Vp]: %d gradient entries are not exactly 0", nonzero);
    double* logits = (double*)malloc_check((size_t)n * Vp * sizeof(double));
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    for (size_t j = (size_t)V * C; j < (size_t)Vp * C; j++) m.params.wte[j] *= -7;
    double loss2 = gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_expect_padded_rows_inert(nonzero, loss, loss2, logits, m.acts.logits, n, V, Vp);
    free(logits);
    gpt_ref_free(&m);
}

// Changing token t0 leaves the logits of positions < t0 in that row bitwise unchanged, changes those at
// t0, and leaves the other row alone; a forward with a shorter T gives the same logits as the first
// positions of the full one (the activations are dense for the T of each call).
static void test_causality(void) {
    gpt_ref_config c = tiny_config();
    gpt_ref_model m;
    gpt_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 9);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 13);
    int n = TINY_B * TINY_T, Vp = c.padded_vocab_size, t0 = 3;
    gpt_ref_forward(&m, inputs, NULL, TINY_B, TINY_T);
    double* logits = (double*)malloc_check((size_t)n * Vp * sizeof(double));
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    inputs[t0] = (inputs[t0] + 1) % c.vocab_size; // row 0, position t0
    gpt_ref_forward(&m, inputs, NULL, TINY_B, TINY_T);
    int changed[3];
    ref_expect_causal(logits, m.acts.logits, n, Vp, TINY_T, t0, changed);
    // shorter T: rows are re-packed densely as (B, 3)
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    int T2 = 3, short_in[TINY_B * 3];
    for (int b = 0; b < TINY_B; b++)
        for (int t = 0; t < T2; t++) short_in[b * T2 + t] = inputs[b * TINY_T + t];
    gpt_ref_forward(&m, short_in, NULL, TINY_B, T2);
    int short_diff = 0;
    for (int b = 0; b < TINY_B; b++)
        for (int t = 0; t < T2; t++)
            for (int j = 0; j < Vp; j++)
                short_diff += logits[((size_t)b * TINY_T + t) * Vp + j] != m.acts.logits[((size_t)b * T2 + t) * Vp + j];
    EXPECT(short_diff == 0, "forward with T=%d differs from the first positions of T=%d in %d logits", T2, TINY_T, short_diff);
    printf("causality: %d earlier / %d own / %d other-row logits changed; T=%d vs T=%d: %d differ\n",
           changed[0], changed[1], changed[2], T2, TINY_T, short_diff);
    free(logits);
    gpt_ref_free(&m);
}

// At GPT-2's init the logits are nearly 0: each is a sum of C products with wte ~ N(0, 0.02), so
// sigma ~ 0.02 sqrt(C) = 0.08. Then lse ~ log(V) + sigma^2/2 = log(V) + 0.003, and the mean of the
// target logits over 16 x 8 positions scatters by ~0.01 (more than sigma/sqrt(128): positions share the
// 37 rows of wte). The band 0.05 covers that several times; a wrong normalization misses it by far.
static void test_init_loss(void) {
    gpt_ref_config c = tiny_config();
    int B = 16, T = c.max_seq_len, n = B * T;
    gpt_ref_model m;
    gpt_ref_build(&m, &c, B, T);
    gpt_ref_init_params(&m, 42);
    int* inputs = (int*)malloc_check((size_t)n * sizeof(int));
    int* targets = (int*)malloc_check((size_t)n * sizeof(int));
    ref_random_tokens(inputs, targets, n, c.vocab_size, 14);
    ref_expect_init_loss(gpt_ref_forward(&m, inputs, targets, B, T), c.vocab_size);
    int pad_zero = 1;
    for (size_t j = (size_t)c.vocab_size * c.channels; j < (size_t)c.padded_vocab_size * c.channels; j++)
        pad_zero &= m.params.wte[j] == 0;
    EXPECT(pad_zero, "init: padded rows of wte are not 0");
    EXPECT(m.params.ln1w[0] == 1 && m.params.lnfb[0] == 0 && m.params.qkvb[0] == 0, "init: LN weights 1, biases 0");
    free(inputs);
    free(targets);
    gpt_ref_free(&m);
}

// Ten AdamW steps (lr 1e-2, wd 0.1, clip 1.0) on one fixed batch: the loss goes down at every step and
// ends clearly lower. Then two exact checks: with zero gradients a step only decays the 2-D weights, by
// the factor (1 - lr wd), and leaves biases and LayerNorm parameters untouched; and the first step of a
// fresh optimizer moves every parameter by lr (g / (|g| + eps) + wd p).
static void test_adamw(void) {
    gpt_ref_config c = tiny_config();
    gpt_ref_model m;
    gpt_ref_build(&m, &c, TINY_B, TINY_T);
    gpt_ref_init_params(&m, 43);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 15);
    double losses[10];
    for (int step = 1; step <= 10; step++) {
        losses[step - 1] = gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
        gpt_ref_backward(&m);
        gpt_ref_clip_grad_norm(&m, 1.0);
        gpt_ref_adamw_step(&m, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
    }
    ref_expect_loss_descent(losses, 10);

    // zero gradients: only decay (m and v stay 0, so the Adam term is 0 exactly)
    double* before = (double*)malloc_check(m.num_params * sizeof(double));
    gpt_ref_init_params(&m, 44);
    memcpy(before, m.params_memory, m.num_params * sizeof(double));
    gpt_ref_zero_grad(&m);
    double lr = 1e-2, wd = 0.1;
    gpt_ref_adamw_step(&m, lr, 0.9, 0.95, 1e-8, wd, 1);
    size_t sizes[GPT_REF_NUM_TENSORS];
    gpt_ref_tensor_sizes(sizes, &c);
    ref_expect_decay_only(m.params_memory, before, sizes, GPT_REF_NUM_TENSORS, gpt_ref_tensor_decays,
                          gpt_ref_tensor_name, lr, wd);

    // first step with real gradients
    gpt_ref_init_params(&m, 46); // also resets m and v: a fresh optimizer
    memcpy(before, m.params_memory, m.num_params * sizeof(double));
    gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    gpt_ref_backward(&m);
    gpt_ref_adamw_step(&m, lr, 0.9, 0.95, 1e-8, wd, 1);
    double max_err = 0;
    size_t off = 0;
    for (int i = 0; i < GPT_REF_NUM_TENSORS; i++) {
        double w = gpt_ref_tensor_decays(i) ? wd : 0.0;
        for (size_t j = off; j < off + sizes[i]; j++) {
            double g = m.grads_memory[j], p = before[j];
            double want = p - lr * (g / (fabs(g) + 1e-8) + w * p);
            max_err = fmax(max_err, fabs(m.params_memory[j] - want));
        }
        off += sizes[i];
    }
    EXPECT(max_err < 1e-12, "adamw first step differs from p - lr (g/(|g|+eps) + wd p) by %.3e", max_err);
    free(before);
    gpt_ref_free(&m);
}

// Clipping to half the norm halves every gradient; clipping above the norm changes nothing.
static void test_clip(void) {
    gpt_ref_config c = tiny_config();
    gpt_ref_model m;
    gpt_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 10);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 16);
    gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    gpt_ref_backward(&m);
    double* g = (double*)malloc_check(m.num_params * sizeof(double));
    memcpy(g, m.grads_memory, m.num_params * sizeof(double));
    double norm = 0;
    for (size_t j = 0; j < m.num_params; j++) norm += g[j] * g[j];
    norm = sqrt(norm);
    double got = gpt_ref_clip_grad_norm(&m, 2 * norm);
    EXPECT(got == gpt_ref_grad_norm(&m) && memcmp(g, m.grads_memory, m.num_params * sizeof(double)) == 0,
           "clip above the norm changed the gradients");
    EXPECT(fabs(got - norm) <= 1e-12 * norm, "grad norm %.17g, expected %.17g", got, norm);
    gpt_ref_clip_grad_norm(&m, norm / 2);
    double max_err = 0;
    for (size_t j = 0; j < m.num_params; j++) max_err = fmax(max_err, fabs(m.grads_memory[j] - g[j] / 2));
    EXPECT(max_err <= 1e-15 * norm, "clip to norm/2 did not halve the gradients (error %.3e)", max_err);
    EXPECT(fabs(gpt_ref_grad_norm(&m) - norm / 2) <= 1e-12 * norm, "norm after clipping is not norm/2");
    free(g);
    gpt_ref_free(&m);
}

// Every target -1: loss 0 and every gradient exactly 0.
static void test_all_ignored(void) {
    gpt_ref_config c = tiny_config();
    gpt_ref_model m;
    gpt_ref_build(&m, &c, TINY_B, TINY_T);
    randomize_params(&m, 11);
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, 17);
    for (int i = 0; i < TINY_B * TINY_T; i++) targets[i] = -1;
    double loss = gpt_ref_forward(&m, inputs, targets, TINY_B, TINY_T);
    gpt_ref_backward(&m);
    EXPECT(loss == 0 && gpt_ref_grad_norm(&m) == 0, "all targets ignored: loss %g, grad norm %g (want 0, 0)",
           loss, gpt_ref_grad_norm(&m));
    gpt_ref_free(&m);
}

static void test_fixture(void) {
    double loss, norm;
    fixture_run(&loss, &norm);
    printf("fixture: loss %.17g grad norm %.17g\n", loss, norm);
    EXPECT(fabs(loss - FIXTURE_LOSS) <= 1e-10 * FIXTURE_LOSS && fabs(norm - FIXTURE_GRAD_NORM) <= 1e-10 * FIXTURE_GRAD_NORM,
           "fixture: loss %.17g, grad norm %.17g differ from the golden values in gpt_ref_fixture.h (%.17g, %.17g); "
           "if the model or init changed on purpose, paste the new values there", loss, norm, FIXTURE_LOSS, FIXTURE_GRAD_NORM);
}

int main(void) {
    test_finite_differences();
    test_padded_rows();
    test_causality();
    test_init_loss();
    test_adamw();
    test_clip();
    test_all_ignored();
    test_fixture();
    return test_summary("test_gpt_ref");
}
