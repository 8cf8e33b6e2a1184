// test_fused_lce_cpu.c: CPU tests of the fused linear cross-entropy's two CPU models.
//   (i)   the fp64 reference (dev/ref/fused_lce_ref.h): its forward against the textbook definition
//         −Σ q_j log p_j (+ z-loss), and its gradients against central finite differences of its own
//         loss, for every element of x and W, with each option on, all together, and the per-row form;
//   (ii)  the fp32 tiled online-softmax algorithm (dev/ref/fused_lce_cpu.h) against the reference at
//         several blockings and awkward sizes: V and Vp not multiples of BN, C not a multiple of BK,
//         N = 1, N not a multiple of BM, all rows ignored, every option on, large logits, per-row dloss;
//   (iii) padded rows of dW untouched, dW added to a non-zero initial value (inside every (ii) check).
// Data are bf16-representable (rounded with bf16_round) and scaled like a real LM head: x ~ N(0, 1),
// W ~ N(0, σ²) with σ = logit_std/√C, so logits have a std of logit_std. The padded rows of W hold
// values 50x larger: if they leaked into the softmax they would dominate it.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../../ref/fused_lce_ref.h"
#include "../../ref/fused_lce_cpu.h"
#include "../testing.h"

typedef struct {
    int N, C, V, Vp;
    float* x;    // (N, C)
    float* W;    // (Vp, C)
    int* t;      // (N)
    float* dW0;  // (Vp, C) the gradient the head adds into
} Problem;

// Rows i with i % ignore_every == 0 get ignore_index as target (ignore_every = 0: none, 1: all).
static Problem problem_make(int N, int C, int V, int Vp, float logit_std, int ignore_every, int ignore_index,
                            uint64_t seed) {
    Problem p;
    p.N = N; p.C = C; p.V = V; p.Vp = Vp;
    uint64_t rng = rand_mix(seed, (uint64_t)N * 131 + C, (uint64_t)V * 7 + Vp);
    p.x = (float*)malloc_check((size_t)N * C * sizeof(float));
    p.W = (float*)malloc_check((size_t)Vp * C * sizeof(float));
    p.t = (int*)malloc_check((size_t)N * sizeof(int));
    p.dW0 = (float*)malloc_check((size_t)Vp * C * sizeof(float));
    float sigma = logit_std / sqrtf((float)C);
    for (size_t i = 0; i < (size_t)N * C; i++) p.x[i] = bf16_round(rand_normal(&rng));
    for (int j = 0; j < Vp; j++)
        for (int k = 0; k < C; k++)
            p.W[(size_t)j * C + k] = bf16_round((j < V ? sigma : 50.0f * sigma) * rand_normal(&rng));
    for (int i = 0; i < N; i++)
        p.t[i] = (ignore_every && i % ignore_every == 0) ? ignore_index : (int)rand_below(&rng, (uint32_t)V);
    // about the size of one step's gradient: an overwrite instead of an add would show in the increment
    for (size_t i = 0; i < (size_t)Vp * C; i++) p.dW0[i] = 1e-3f * rand_normal(&rng);
    return p;
}

static void problem_free(Problem* p) { free(p->x); free(p->W); free(p->t); free(p->dW0); }

static FusedLceOptions options(float z_loss, float softcap, float smoothing) {
    FusedLceOptions o = fused_lce_options_default();
    o.z_loss = z_loss; o.softcap = softcap; o.label_smoothing = smoothing;
    return o;
}

// --- (i) the reference -------------------------------------------------------------------------------

// The objective whose gradient the reference returns: dloss·mean, or Σ dloss_rows[i]·loss_i.
static double objective(const Problem* p, const float* x, const float* W, FusedLceOptions opt, double dloss,
                        const double* dloss_rows) {
    double* loss_rows = (double*)malloc_check((size_t)p->N * sizeof(double));
    double* lse = (double*)malloc_check((size_t)p->N * sizeof(double));
    double f = fused_lce_ref_compute(loss_rows, lse, NULL, NULL, x, p->t, W, p->N, p->C, p->V, opt, dloss, dloss_rows, 0);
    if (dloss_rows) { f = 0.0; for (int i = 0; i < p->N; i++) f += dloss_rows[i] * loss_rows[i]; }
    else f *= dloss;
    free(loss_rows); free(lse);
    return f;
}

// max |fd − analytic| / max |analytic| over one array. Each element moves by ±h in float (exactly: the
// data have 8 significant bits, h = 2^-14 needs at most ~20), and the step divided by is the difference
// of the two floats anyway. The O(h²) truncation is ~1e-9 of the gradient, the loss's rounding ~1e-16/h
// ~1e-11: measured ≤ 3e-9, against a tolerance of 1e-7 (a wrong term in a gradient gives ≥ 1e-3).
static double fd_error(const Problem* p, float* v, size_t n, const double* analytic, const float* base,
                       float* x, float* W, FusedLceOptions opt, double dloss, const double* dloss_rows) {
    const float h = 0x1p-14f;
    double max_err = 0.0, max_an = 0.0;
    for (size_t i = 0; i < n; i++) {
        float keep = v[i];
        float up = keep + h, down = keep - h;
        v[i] = up;   double fu = objective(p, x, W, opt, dloss, dloss_rows);
        v[i] = down; double fdn = objective(p, x, W, opt, dloss, dloss_rows);
        v[i] = keep;
        double fd = (fu - fdn) / ((double)up - (double)down);
        double an = analytic[i] - (base ? (double)base[i] : 0.0);
        if (fabs(fd - an) > max_err) max_err = fabs(fd - an);
        if (fabs(an) > max_an) max_an = fabs(an);
    }
    return max_an > 0.0 ? max_err / max_an : max_err;
}

// The textbook forward: p = softmax(s) without max subtraction (logits here are small), loss_i =
// −Σ_j q_j log p_j + z·lse² with q = (1−ε)·onehot + ε/V. Independent of the reference's formula.
static double textbook_error(const Problem* p, FusedLceOptions opt, const FusedLceRefResult* ref) {
    double err = 0.0, total = 0.0, eps = opt.label_smoothing;
    int n_valid = 0;
    for (int i = 0; i < p->N; i++) {
        double se = 0.0, ce = 0.0, s[64];
        for (int j = 0; j < p->V; j++) {
            double z = 0.0;
            for (int k = 0; k < p->C; k++) z += (double)p->x[i * p->C + k] * p->W[j * p->C + k];
            s[j] = opt.softcap > 0.0f ? opt.softcap * tanh(z / opt.softcap) : z;
            se += exp(s[j]);
        }
        for (int j = 0; j < p->V; j++) ce -= ((j == p->t[i] ? 1.0 - eps : 0.0) + eps / p->V) * log(exp(s[j]) / se);
        double li = p->t[i] == opt.ignore_index ? 0.0 : ce + opt.z_loss * log(se) * log(se);
        n_valid += p->t[i] != opt.ignore_index;
        total += li;
        err = fmax(err, fabs(li - ref->loss_rows[i]) / fmax(fabs(li), 1e-300));
        err = fmax(err, fabs(log(se) - ref->lse[i]) / fabs(log(se)));
    }
    double mean = n_valid ? total / n_valid : 0.0;
    return fmax(err, fabs(mean - ref->loss) / fmax(fabs(mean), 1e-300));
}

static void test_reference(const char* name, int ignore_every, FusedLceOptions opt, double dloss, int per_row) {
    Problem p = problem_make(6, 5, 7, 8, 2.0f, ignore_every, opt.ignore_index, 11);
    double dloss_rows[6] = {0};
    uint64_t rng = 99;
    for (int i = 0; i < p.N; i++) dloss_rows[i] = 2.0 * rand_uniform(&rng) - 1.0;  // signs of both kinds
    const double* dlr = per_row ? dloss_rows : NULL;
    FusedLceRefResult ref = fused_lce_ref_forward_backward(p.x, p.W, p.t, p.N, p.C, p.V, p.Vp, opt, dloss, dlr, p.dW0);
    double e_fwd = textbook_error(&p, opt, &ref);
    double e_dx = fd_error(&p, p.x, (size_t)p.N * p.C, ref.dx, NULL, p.x, p.W, opt, dloss, dlr);
    // all Vp rows: the padded ones must have a zero gradient, and finite differences agree
    double e_dW = fd_error(&p, p.W, (size_t)p.Vp * p.C, ref.dW, p.dW0, p.x, p.W, opt, dloss, dlr);
    printf("reference, %-34s loss %.6f  textbook %.1e  fd: dx %.1e  dW %.1e\n", name, ref.loss, e_fwd, e_dx, e_dW);
    EXPECT(e_fwd <= 1e-12, "%s: forward differs from the textbook definition by %.3e", name, e_fwd);
    EXPECT(e_dx <= 1e-7, "%s: dx vs finite differences %.3e of max", name, e_dx);
    EXPECT(e_dW <= 1e-7, "%s: dW vs finite differences %.3e of max", name, e_dW);
    int zero = 1;  // ignored rows: zero dx, exactly
    for (int i = 0; i < p.N; i++)
        for (int k = 0; k < p.C && p.t[i] == opt.ignore_index; k++) zero &= ref.dx[i * p.C + k] == 0.0;
    EXPECT(zero, "%s: an ignored row has a non-zero dx", name);
    fused_lce_ref_result_free(&ref);
    problem_free(&p);
}

// --- (ii) the tiled fp32 algorithm ---------------------------------------------------------------------

// Tolerances against the exact reference. lse and loss: fp32 logits from C fp32 products err by ~1e-6
// absolute at logit scales of a few units (~1e-5 at 30); expf/logf add ~1e-7 relative; 1e-5 relative
// leaves a margin of 10 or more. dx, dW: each g is rounded once to bf16 (8 significant bits, relative
// error |δ| ≤ 2^-8 ≈ 3.9e-3); an element Σ_j g_j·w_jk then errs by at most 2^-8·Σ_j |g_j|·max|w|, and
// Σ_j |g_j| ≈ 2·scale (the target's −(1−p_t) and the softmax mass), while the largest element is about
// scale·max|w| (the target row's w): 2·2^-8 ≈ 8e-3 of max. The target term's own rounding reaches
// 2^-8 of max by itself, and it is systematic, not random: g_t ≈ −scale in every row, so all rows round
// alike, by the bf16 error of 1/N_valid (3.4e-3 for 240; 0 for 256). Even the l2 error then reaches ~2^-8
// (measured here: up to 3.6e-3 of max, l2 3.2e-3). Nothing much tighter than the bound is safe.
static const FusedLceTolerance TOL = {1e-5, 1e-5, 8e-3, 8e-3};
// Against the reference with g rounded to bf16 too (fused_lce_ref_forward_backward_g): what is left is fp32
// accumulation (~1e-6) and the few g whose rounding fp32 noise flips by one bf16 ulp (2^-7 of that g).
// A flip of a large g moves one row of dx by up to 2^-7 of that row, so the max norm cannot be tight
// here; the l2 norm can: a flip of the target's g in one of ≥ 100 valid rows moves it by ≤ 2^-7/√100
// ≈ 8e-4, and such flips are rare (the target's g has an fp32 error ~1e-7). Measured l2_rel ≤ 6e-5 (one
// flip of a g ≈ 0.12·scale), else ≤ 5e-6; 1e-3 still catches a dropped vocab tile of non-target columns
// (measured 0.13) or ε/Vp for ε/V in the strong case below, which the bf16 bound above may not.
#define TOL_MODEL 1e-3

typedef struct { int BM, BN, BK; } Blocking;
// the last: variant 5's shape of blocking (llmc/head/fused_lce_blocks.cuh), row blocks much taller than a tile
// and vocab blocks of several hundred columns, the last one partial
static const Blocking BLOCKINGS[] = {{64, 128, 32}, {128, 256, 64}, {16, 32, 16}, {96, 400, 64}};
#define NUM_BLOCKINGS ((int)(sizeof(BLOCKINGS) / sizeof(BLOCKINGS[0])))

// One problem, checked at `nb` blockings (from the first). Returns nothing: every check is an EXPECT.
static void test_tiled(const char* name, const Problem* p, FusedLceOptions opt, const float* dloss_rows, int nb) {
    int N = p->N, C = p->C, V = p->V, Vp = p->Vp;
    double* dlr = NULL;
    if (dloss_rows) {
        dlr = (double*)malloc_check((size_t)N * sizeof(double));
        for (int i = 0; i < N; i++) dlr[i] = dloss_rows[i];
    }
    FusedLceRefResult ref = fused_lce_ref_forward_backward(p->x, p->W, p->t, N, C, V, Vp, opt, 1.0, dlr, p->dW0);
    FusedLceRefResult model = fused_lce_ref_forward_backward_g(p->x, p->W, p->t, N, C, V, Vp, opt, 1.0, dlr, p->dW0, 1);
    float* loss_rows = (float*)malloc_check((size_t)N * sizeof(float));
    float* lse = (float*)malloc_check((size_t)N * sizeof(float));
    float* dx = (float*)malloc_check((size_t)N * C * sizeof(float));
    float* dW = (float*)malloc_check((size_t)Vp * C * sizeof(float));
    for (int b = 0; b < nb; b++) {
        Blocking bl = BLOCKINGS[b];
        for (size_t i = 0; i < (size_t)N * C; i++) dx[i] = NAN;  // poison: every element must be written
        memcpy(dW, p->dW0, (size_t)Vp * C * sizeof(float));
        int lazy = b % 2;  // every other blocking with the wgmma forward's fold
        float loss = fused_lce_cpu_forward(loss_rows, lse, p->x, p->t, p->W, N, C, V, Vp, opt, bl.BM, bl.BN, bl.BK, lazy);
        fused_lce_cpu_backward(dx, dW, lse, p->x, p->t, dloss_rows, 1.0f, p->W, N, C, V, Vp, opt, bl.BM, bl.BN, bl.BK);
        char title[160];
        snprintf(title, sizeof(title), "tiled %d/%d/%d%s, %s (N=%d C=%d V=%d Vp=%d, %d valid)", bl.BM, bl.BN, bl.BK,
                 lazy ? " lazy max" : "", name, N, C, V, Vp, ref.n_valid);
        int ok = fused_lce_ref_check_outputs(title, &ref, TOL, loss, loss_rows, lse, dx, dW, p->dW0, N, C, V, Vp);
        EXPECT(ok, "%s: outside the tolerances", title);
        FusedLceErrStats e = fused_lce_ref_compare("dx vs bf16-g model", dx, model.dx, NULL, (size_t)N * C);
        EXPECT(e.l2_rel <= TOL_MODEL, "%s: dx l2_rel %.2e from the bf16-g model", title, e.l2_rel);
        e = fused_lce_ref_compare("dW vs bf16-g model", dW, model.dW, p->dW0, (size_t)V * C);
        EXPECT(e.l2_rel <= TOL_MODEL, "%s: dW l2_rel %.2e from the bf16-g model", title, e.l2_rel);
        if (ref.n_valid == 0) {  // nothing counts: exact zeros, dW bitwise as it was
            int zero = loss == 0.0f;
            for (int i = 0; i < N; i++) zero &= loss_rows[i] == 0.0f;
            for (size_t i = 0; i < (size_t)N * C; i++) zero &= dx[i] == 0.0f;
            EXPECT(zero, "%s: loss or dx not exactly 0", title);
            EXPECT(!memcmp(dW, p->dW0, (size_t)Vp * C * sizeof(float)), "%s: dW changed", title);
        }
    }
    free(loss_rows); free(lse); free(dx); free(dW); free(dlr);
    fused_lce_ref_result_free(&ref);
    fused_lce_ref_result_free(&model);
}

int main(void) {
    FusedLceOptions plain = fused_lce_options_default();
    FusedLceOptions all = options(0.05f, 2.5f, 0.2f);  // strong settings: each term visibly changes the gradient
    FusedLceOptions odd_ignore = plain;
    odd_ignore.ignore_index = -100;  // the option is honoured, not the trainer's constant

    test_reference("plain", 0, plain, 1.0, 0);
    test_reference("ignore_index (rows 0, 3)", 3, odd_ignore, 1.0, 0);
    test_reference("z_loss 0.05", 0, options(0.05f, 0.0f, 0.0f), 1.0, 0);
    test_reference("softcap 2.5", 0, options(0.0f, 2.5f, 0.0f), 1.0, 0);
    test_reference("label_smoothing 0.2", 0, options(0.0f, 0.0f, 0.2f), 1.0, 0);
    test_reference("all + ignore, dloss 0.7", 3, all, 0.7, 0);
    test_reference("all + ignore, per-row dloss", 3, all, 1.0, 1);
    test_reference("all rows ignored", 1, all, 1.0, 0);

    // option values of a real run
    FusedLceOptions lm = options(1e-4f, 15.0f, 0.1f);
    Problem p;
    p = problem_make(300, 96, 1000, 1024, 3.0f, 5, plain.ignore_index, 1);
    test_tiled("every 5th row ignored", &p, plain, NULL, NUM_BLOCKINGS);
    problem_free(&p);
    p = problem_make(1, 64, 1000, 1024, 3.0f, 0, plain.ignore_index, 2);
    test_tiled("N=1, all options", &p, lm, NULL, NUM_BLOCKINGS);
    problem_free(&p);
    p = problem_make(37, 32, 500, 512, 3.0f, 1, plain.ignore_index, 3);
    test_tiled("all rows ignored", &p, lm, NULL, NUM_BLOCKINGS);
    problem_free(&p);
    // Vp = 784 is not a multiple of BN either: the last tile reaches past W's last row
    p = problem_make(130, 64, 777, 784, 3.0f, 7, plain.ignore_index, 4);
    test_tiled("softcap + z-loss + smoothing", &p, lm, NULL, NUM_BLOCKINGS);
    problem_free(&p);
    // strong options make each term's gradient large; V far below Vp makes a V/Vp mix-up large
    p = problem_make(100, 64, 700, 1024, 3.0f, 0, plain.ignore_index, 5);
    test_tiled("strong z-loss 0.05, softcap 2.5, eps 0.2", &p, all, NULL, 1);
    problem_free(&p);
    // logit std 10: the max subtraction and the rescaling matter; std 30: exp without them overflows fp32
    p = problem_make(100, 64, 1000, 1024, 10.0f, 0, plain.ignore_index, 6);
    test_tiled("large logits (std 10)", &p, plain, NULL, NUM_BLOCKINGS);
    problem_free(&p);
    p = problem_make(64, 64, 1000, 1024, 30.0f, 0, plain.ignore_index, 7);
    test_tiled("huge logits (std 30), z-loss + smoothing", &p, options(1e-4f, 0.0f, 0.1f), NULL, 1);  // no cap
    problem_free(&p);
    // logits that grow along the vocabulary (W's rows from 256 on scaled): up to ~20 above the first tiles'
    // (the lazy fold sums relative to a stale max) and ~100 above (it takes the tile's max after all)
    for (int k = 0; k < 2; k++) {
        p = problem_make(64, 64, 1000, 1024, 3.0f, 0, plain.ignore_index, 10 + k);
        for (size_t i = (size_t)256 * 64; i < (size_t)1024 * 64; i++) p.W[i] *= k ? 16.0f : 3.0f;
        test_tiled(k ? "logits x16 from column 256" : "logits x3 from column 256", &p, options(0.0f, 0.0f, 0.1f * k),
                   NULL, 2);
        problem_free(&p);
    }
    // per-row upstream gradients, as per-token weights (some 0) of a mean
    p = problem_make(200, 64, 1000, 1024, 3.0f, 9, plain.ignore_index, 8);
    float* w = (float*)malloc_check(200 * sizeof(float));
    uint64_t rng = 5;
    for (int i = 0; i < 200; i++) w[i] = (i % 11 == 0 ? 0.0f : 2.0f * rand_uniform(&rng)) / 200.0f;
    test_tiled("per-row dloss, all options", &p, lm, w, 2);
    free(w);
    problem_free(&p);
    return test_summary("test_fused_lce_cpu");
}
