// test_model_ref.c: CPU tests of the reference model (dev/ref/model_ref.h) of every family, built in
// double; its layers alone are test_ref_layers.c. For each family (GPT-2, Llama-style), checks: the
// backward against central finite differences of the forward loss for every element of every parameter
// tensor (reported per Hugging Face tensor where one of ours stacks several: wqkv as q_proj, k_proj,
// v_proj, w_gateup as gate_proj, up_proj), the Llama-style model at NKV = 2, 1 and NH; padded
// vocabulary rows (of the embedding and an untied head) never count and get exactly zero gradient;
// causality (a later token does not change earlier logits, and a shorter T gives the same logits); the
// init (padded rows 0, norm weights 1, biases 0) and its loss, about log(V); AdamW steps on a fixed
// batch lower the loss, weight decay touches only the tensors the table says, one step matches the
// formula; gradient clipping; all targets ignored; and the golden values of model_ref_fixture.h, which
// test_model_ref_float compares the float build against.
#define REF_DOUBLE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../../ref/model_ref.h"
#include "../../ref/model_ref_fixture.h"
#include "../finite_diff.h"
#include "ref_model_checks.h"
#include "../testing.h"

// The tiny models: two layers, V not a multiple of anything, T < maxT (unused position rows). GPT-2
// with two heads of 8; the Llama-style model with four query heads of hs 4 on NKV kv heads and an odd
// F, RoPE theta 100 so that the second rotary pair turns by 0.1 rad per position (at 1e4 it would
// barely move).
#define TINY_B 2
#define TINY_T 5

static ModelConfig tiny_config(int family, int num_kv_heads) {
    if (family == MODEL_FAMILY_GPT2) return model_config_gpt2_sizes(8, 37, 48, 2, 2, 16);
    return model_config_llama_sizes(37, 48, 8, 2, 16, 4, num_kv_heads, 19, 100.0, 1e-5);
}

// The finite differences' error floor (finite_diff.h): the error is relative for gradients of normal
// size (up to ~0.5 here), absolute / floor for tiny ones, whose fd is mostly the ~1e-10 round-off. For
// GPT-2, 1e-3 keeps the tiny gradients' error below ~3e-7; the Llama-style model has more gradients
// near that noise (RMSNorm weights, the SwiGLU gate), where 1e-3 would leave a margin of only ~3.
static double fd_floor(int family) { return family == MODEL_FAMILY_GPT2 ? 1e-3 : 1e-2; }

// Parameters of order one instead of the init's 0.02: at init the tiny model is nearly linear (softmaxes
// flat, GELU and SiLU near their linear parts), which would hide mistakes in those formulas, and larger
// gradients stand further above the round-off of the finite differences. Norm weights are 1 + noise
// and every bias is non-zero so that no term drops out; the padded rows are random too (they must still
// not count).
static void randomize_params(ref_model* m, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < m->spec->num_tensors; i++)
        fill_normal(m->params_memory + m->tensor_offset[i], m->tensor_size[i],
                    m->spec->tensors[i].init == MODEL_INIT_ONES ? 1.0 : 0.0, 0.3, &rng);
}

// The tiny model of a family (the Llama-style one on num_kv_heads kv heads), built for TINY_B x TINY_T,
// its parameters randomized from param_seed, and its batch from batch_seed into inputs and targets
// (TINY_B * TINY_T each).
static void tiny_build(ref_model* m, int family, int num_kv_heads, uint64_t param_seed, uint64_t batch_seed,
                       int* inputs, int* targets) {
    ModelConfig c = tiny_config(family, num_kv_heads);
    ref_model_build(m, &c, TINY_B, TINY_T);
    randomize_params(m, param_seed);
    ref_tiny_batch(inputs, targets, TINY_B * TINY_T, c.vocab_size, batch_seed);
}

typedef struct {
    ref_model* m;
    const int* inputs;
    const int* targets;
} model_case;

static double model_loss(void* ctx) {
    model_case* k = (model_case*)ctx;
    return ref_model_forward(k->m, k->inputs, k->targets, TINY_B, TINY_T);
}

// The Hugging Face part (hf_parts of the table) that element j of tensor t belongs to: a stacked weight
// holds its parts' rows one after the other in every layer's slice.
static int hf_part(const ModelTensorSpec* t, size_t j, const ModelConfig* c) {
    if (t->hf_num_parts < 2) return 0;
    size_t row = (j / (size_t)model_dim(c, t->cols)) % (size_t)model_dim(c, t->rows), end = 0;
    for (int p = 0; p < t->hf_num_parts; p++) {
        end += (size_t)model_dim(c, t->hf_parts[p].rows);
        if (row < end) return p;
    }
    return t->hf_num_parts - 1;
}

// "wqkv q_proj" for part p of a stacked tensor (the last name component before ".weight"), else the
// tensor's short name.
static void part_name(char* out, size_t size, const ModelTensorSpec* t, int p) {
    if (t->hf_num_parts < 2) {
        snprintf(out, size, "%s", t->name);
        return;
    }
    const char* hf = t->hf_parts[p].name;
    const char* end = strstr(hf, ".weight");
    const char* start = end;
    while (start > hf && start[-1] != '.') start--;
    snprintf(out, size, "%s %.*s", t->name, (int)(end - start), start);
}

static void test_finite_differences(int family, int num_kv_heads) {
    ref_model m;
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    tiny_build(&m, family, num_kv_heads, family == MODEL_FAMILY_GPT2 ? 7 : 7 + (uint64_t)num_kv_heads, 11, inputs,
               targets);
    const ModelConfig c = m.config;
    double loss = ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_model_backward(&m);
    double* grads = (double*)malloc_check(m.num_params * sizeof(double));
    memcpy(grads, m.grads_memory, m.num_params * sizeof(double));
    printf("%s vs finite differences, NH %d NKV %d: loss %.6f, h %g, error = |a - fd| / max(|a|, |fd|, %g), "
           "tolerance %g\n", m.spec->name, c.num_heads, c.num_kv_heads, loss, FD_H, fd_floor(family), FD_TOL);
    model_case k;
    k.m = &m;
    k.inputs = inputs;
    k.targets = targets;
    for (int i = 0; i < m.spec->num_tensors; i++) {
        const ModelTensorSpec* t = &m.spec->tensors[i];
        size_t off = m.tensor_offset[i], n[3] = {0, 0, 0};
        fd_stats s[3];
        for (int p = 0; p < 3; p++) fd_stats_start(&s[p], fd_floor(family));
        for (size_t j = 0; j < m.tensor_size[i]; j++) {
            int p = hf_part(t, j, &c);
            fd_element(&s[p], m.params_memory + off, j, grads[off + j], model_loss, &k);
            n[p]++;
        }
        for (int p = 0; p < 3; p++) {
            if (n[p] == 0) continue;
            char name[64];
            part_name(name, sizeof(name), t, p);
            fd_report(name, &s[p], n[p]);
        }
    }
    free(grads);
    ref_model_free(&m);
}

// Padded rows [V:Vp] of the embedding and of an untied head (random here) get exactly zero gradient,
// and changing them changes neither the loss nor the first V logits, bit for bit.
static void test_padded_rows(int family) {
    ref_model m;
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    tiny_build(&m, family, 2, 8, 12, inputs, targets);
    const ModelConfig c = m.config;
    int n = TINY_B * TINY_T, V = c.vocab_size, Vp = c.padded_vocab_size, C = c.channels;
    double loss = ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_model_backward(&m);
    int nonzero = 0, padded_tensors = 0;
    for (int i = 0; i < m.spec->num_tensors; i++) {
        if (m.spec->tensors[i].rows != MODEL_DIM_VP) continue;
        padded_tensors++;
        for (size_t j = (size_t)V * C; j < (size_t)Vp * C; j++) nonzero += m.grads_memory[m.tensor_offset[i] + j] != 0;
    }
    EXPECT(padded_tensors == (m.spec->tied_head ? 1 : 2), "%s: %d tensors of Vp rows", m.spec->name, padded_tensors);
    EXPECT(nonzero == 0, "%s: padded rows [V:Vp]: %d gradient entries are not exactly 0", m.spec->name, nonzero);
    double* logits = (double*)malloc_check((size_t)n * Vp * sizeof(double));
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    for (int i = 0; i < m.spec->num_tensors; i++)
        if (m.spec->tensors[i].rows == MODEL_DIM_VP)
            for (size_t j = (size_t)V * C; j < (size_t)Vp * C; j++) m.params_memory[m.tensor_offset[i] + j] *= -7;
    double loss2 = ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_expect_padded_rows_inert(nonzero, loss, loss2, logits, m.acts.logits, n, V, Vp);
    free(logits);
    ref_model_free(&m);
}

// Changing token t0 leaves the logits of positions < t0 in that row bitwise unchanged, changes those at
// t0, and leaves the other row alone; a forward with a shorter T gives the same logits as the first
// positions of the full one (the activations are dense for the T of each call).
static void test_causality(int family) {
    ref_model m;
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    tiny_build(&m, family, 2, 9, 13, inputs, targets);
    const ModelConfig c = m.config;
    int n = TINY_B * TINY_T, Vp = c.padded_vocab_size, t0 = 3;
    ref_model_forward(&m, inputs, NULL, TINY_B, TINY_T);
    double* logits = (double*)malloc_check((size_t)n * Vp * sizeof(double));
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    inputs[t0] = (inputs[t0] + 1) % c.vocab_size;  // row 0, position t0
    ref_model_forward(&m, inputs, NULL, TINY_B, TINY_T);
    int changed[3];
    ref_expect_causal(logits, m.acts.logits, n, Vp, TINY_T, t0, changed);
    // shorter T: rows are re-packed densely as (B, 3)
    memcpy(logits, m.acts.logits, (size_t)n * Vp * sizeof(double));
    int T2 = 3, short_in[TINY_B * 3];
    for (int b = 0; b < TINY_B; b++)
        for (int t = 0; t < T2; t++) short_in[b * T2 + t] = inputs[b * TINY_T + t];
    ref_model_forward(&m, short_in, NULL, TINY_B, T2);
    int short_diff = 0;
    for (int b = 0; b < TINY_B; b++)
        for (int t = 0; t < T2; t++)
            for (int j = 0; j < Vp; j++)
                short_diff += logits[((size_t)b * TINY_T + t) * Vp + j] != m.acts.logits[((size_t)b * T2 + t) * Vp + j];
    EXPECT(short_diff == 0, "%s: forward with T=%d differs from the first positions of T=%d in %d logits",
           m.spec->name, T2, TINY_T, short_diff);
    printf("%s causality: %d earlier / %d own / %d other-row logits changed; T=%d vs T=%d: %d differ\n",
           m.spec->name, changed[0], changed[1], changed[2], T2, TINY_T, short_diff);
    free(logits);
    ref_model_free(&m);
}

// At init the logits are nearly 0: the final norm's output has RMS ~1 and the head ~ N(0, 0.02), so each
// logit has sigma ~ 0.02 sqrt(C) = 0.08. Then lse ~ log(V) + sigma^2/2 = log(V) + 0.003, and the mean of
// the target logits over 16 x 8 positions scatters by ~0.01 (more than sigma/sqrt(128): positions share
// the 37 rows of the embedding). The band 0.05 covers that several times; a wrong normalization or init
// misses it by far. The init itself: padded rows 0, norm weights 1, biases 0, as the table says.
static void test_init(int family) {
    ModelConfig c = tiny_config(family, 2);
    int B = 16, T = c.max_seq_len, n = B * T;
    ref_model m;
    ref_model_build(&m, &c, B, T);
    ref_model_init_params(&m, 42);
    int* inputs = (int*)malloc_check((size_t)n * sizeof(int));
    int* targets = (int*)malloc_check((size_t)n * sizeof(int));
    ref_random_tokens(inputs, targets, n, c.vocab_size, 14);
    printf("%s ", m.spec->name);
    ref_expect_init_loss(ref_model_forward(&m, inputs, targets, B, T), c.vocab_size);
    for (int i = 0; i < m.spec->num_tensors; i++) {
        const ModelTensorSpec* t = &m.spec->tensors[i];
        const double* p = m.params_memory + m.tensor_offset[i];
        int random = t->init == MODEL_INIT_NORMAL || t->init == MODEL_INIT_RESID;
        size_t drawn = !random ? 0 : t->rows == MODEL_DIM_VP ? (size_t)c.vocab_size * c.channels : m.tensor_size[i];
        double rest = t->init == MODEL_INIT_ONES ? 1.0 : 0.0;
        size_t wrong = 0;
        for (size_t j = 0; j < m.tensor_size[i]; j++) wrong += j < drawn ? p[j] == 0 : p[j] != rest;
        EXPECT(wrong == 0, "%s init: %zu elements of %s are not what its init says (padded rows 0, norm weights 1, "
               "biases 0, the rest drawn)", m.spec->name, wrong, t->name);
    }
    free(inputs);
    free(targets);
    ref_model_free(&m);
}

// Ten AdamW steps (lr 1e-2, wd 0.1, clip 1.0) on one fixed batch: the loss goes down at every step and
// ends clearly lower. Then two exact checks, from random parameters (norm weights other than 1, biases
// other than 0, so that a decay would show): with zero gradients a step only decays the tensors the
// table says, by the factor (1 - lr wd), and leaves the others untouched; and the first step of a fresh
// optimizer moves every parameter by lr (g / (|g| + eps) + wd p).
static void test_adamw(int family) {
    ref_model m;
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    tiny_build(&m, family, 2, 43, 15, inputs, targets);
    ref_model_init_params(&m, 43);  // a real start: the family's init
    double losses[10];
    for (int step = 1; step <= 10; step++) {
        losses[step - 1] = ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
        ref_model_backward(&m);
        ref_model_clip_grad_norm(&m, 1.0);
        ref_model_adamw_step(&m, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
    }
    printf("%s ", m.spec->name);
    ref_expect_loss_descent(losses, 10);

    // zero gradients: only decay (m and v stay 0, so the Adam term is 0 exactly)
    double* before = (double*)malloc_check(m.num_params * sizeof(double));
    ref_model_init_params(&m, 44);  // clears m and v: a fresh optimizer
    randomize_params(&m, 44);
    memcpy(before, m.params_memory, m.num_params * sizeof(double));
    ref_model_zero_grad(&m);
    double lr = 1e-2, wd = 0.1;
    ref_model_adamw_step(&m, lr, 0.9, 0.95, 1e-8, wd, 1);
    ref_expect_decay_only(&m, before, lr, wd);

    // first step with real gradients
    ref_model_init_params(&m, 46);  // also resets m and v: a fresh optimizer
    randomize_params(&m, 46);
    memcpy(before, m.params_memory, m.num_params * sizeof(double));
    ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_model_backward(&m);
    ref_model_adamw_step(&m, lr, 0.9, 0.95, 1e-8, wd, 1);
    double max_err = 0;
    for (int i = 0; i < m.spec->num_tensors; i++) {
        double w = m.spec->tensors[i].decay ? wd : 0.0;
        for (size_t j = m.tensor_offset[i]; j < m.tensor_offset[i] + m.tensor_size[i]; j++) {
            double g = m.grads_memory[j], p = before[j];
            double want = p - lr * (g / (fabs(g) + 1e-8) + w * p);
            max_err = fmax(max_err, fabs(m.params_memory[j] - want));
        }
    }
    EXPECT(max_err < 1e-12, "%s: adamw first step differs from p - lr (g/(|g|+eps) + wd p) by %.3e", m.spec->name,
           max_err);
    free(before);
    ref_model_free(&m);
}

// Clipping to half the norm halves every gradient; clipping above the norm changes nothing.
static void test_clip(int family) {
    ref_model m;
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    tiny_build(&m, family, 2, 10, 16, inputs, targets);
    ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_model_backward(&m);
    double* g = (double*)malloc_check(m.num_params * sizeof(double));
    memcpy(g, m.grads_memory, m.num_params * sizeof(double));
    double norm = 0;
    for (size_t j = 0; j < m.num_params; j++) norm += g[j] * g[j];
    norm = sqrt(norm);
    double got = ref_model_clip_grad_norm(&m, 2 * norm);
    EXPECT(got == ref_model_grad_norm(&m) && memcmp(g, m.grads_memory, m.num_params * sizeof(double)) == 0,
           "%s: clip above the norm changed the gradients", m.spec->name);
    EXPECT(fabs(got - norm) <= 1e-12 * norm, "%s: grad norm %.17g, expected %.17g", m.spec->name, got, norm);
    ref_model_clip_grad_norm(&m, norm / 2);
    double max_err = 0;
    for (size_t j = 0; j < m.num_params; j++) max_err = fmax(max_err, fabs(m.grads_memory[j] - g[j] / 2));
    EXPECT(max_err <= 1e-15 * norm, "%s: clip to norm/2 did not halve the gradients (error %.3e)", m.spec->name,
           max_err);
    EXPECT(fabs(ref_model_grad_norm(&m) - norm / 2) <= 1e-12 * norm, "%s: norm after clipping is not norm/2",
           m.spec->name);
    printf("%s clip: grad norm %.6f, clipped to half and above\n", m.spec->name, norm);
    free(g);
    ref_model_free(&m);
}

// Every target -1: loss 0 and every gradient exactly 0.
static void test_all_ignored(int family) {
    ref_model m;
    int inputs[TINY_B * TINY_T], targets[TINY_B * TINY_T];
    tiny_build(&m, family, 1, 11, 17, inputs, targets);
    for (int i = 0; i < TINY_B * TINY_T; i++) targets[i] = -1;
    double loss = ref_model_forward(&m, inputs, targets, TINY_B, TINY_T);
    ref_model_backward(&m);
    EXPECT(loss == 0 && ref_model_grad_norm(&m) == 0, "%s: all targets ignored: loss %g, grad norm %g (want 0, 0)",
           m.spec->name, loss, ref_model_grad_norm(&m));
    ref_model_free(&m);
}

// The fixture reproduces its golden values to 1e-10 relative: the loss, the global gradient norm and
// each tensor's.
static void test_fixture(int family) {
    const ModelSpec* s = model_spec(family);
    const ref_fixture_golden* want = &ref_fixture_goldens[family];
    ref_fixture_golden got;
    ref_fixture_run(family, &got);
    double max_rel = fabs(got.grad_norm - want->grad_norm) / want->grad_norm;
    printf("fixture %s: loss %.17g grad norm %.17g\nfixture %s: grad norms", s->flag, got.loss, got.grad_norm, s->flag);
    for (int i = 0; i < s->num_tensors; i++) {
        printf(" %.17g%s", got.tensor_grad_norms[i], i + 1 < s->num_tensors ? "," : "\n");
        double w = want->tensor_grad_norms[i];
        max_rel = fmax(max_rel, fabs(got.tensor_grad_norms[i] - w) / w);
    }
    EXPECT(fabs(got.loss - want->loss) <= 1e-10 * want->loss && max_rel <= 1e-10,
           "%s fixture: loss %.17g (golden %.17g), grad norms up to %.3e relative from the golden values in "
           "model_ref_fixture.h; if the model or init changed on purpose, paste the new values there",
           s->name, got.loss, want->loss, max_rel);
}

int main(void) {
    test_finite_differences(MODEL_FAMILY_GPT2, 2);
    test_finite_differences(MODEL_FAMILY_LLAMA, 2);
    test_finite_differences(MODEL_FAMILY_LLAMA, 1);
    test_finite_differences(MODEL_FAMILY_LLAMA, 4);
    for (int family = 0; family < MODEL_NUM_FAMILIES; family++) {
        test_padded_rows(family);
        test_causality(family);
        test_init(family);
        test_adamw(family);
        test_clip(family);
        test_all_ignored(family);
        test_fixture(family);
    }
    return test_summary("test_model_ref");
}
