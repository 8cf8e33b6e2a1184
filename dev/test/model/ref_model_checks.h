// ref_model_checks.h: what test_model_ref.c asks of the CPU reference model (dev/ref/model_ref.h, the
// double build: define REF_DOUBLE before the first include): the random batches, and the verdicts on
// padded vocabulary rows, causality, the loss at init, a short AdamW run and a decay-only AdamW step,
// one definition of each property for every family.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "../../../llmc/core/rand.h"
#include "../../ref/model_ref.h"
#include "../testing.h"

// n random ids in [0, V) for inputs and targets, drawn alternately from seed.
static inline void ref_random_tokens(int* inputs, int* targets, int n, int V, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        inputs[i] = (int)(rand_next(&rng) % (uint64_t)V);
        targets[i] = (int)(rand_next(&rng) % (uint64_t)V);
    }
}

// The tiny models' batch of two rows of five: random tokens, targets -1 at three of the ten positions
// (one of them the last of a row), so that every loss also exercises ignored positions.
static inline void ref_tiny_batch(int* inputs, int* targets, int n, int V, uint64_t seed) {
    ref_random_tokens(inputs, targets, n, V, seed);
    targets[1] = targets[4] = targets[7] = -1;
}

// Padded vocabulary rows were changed between two forwards (loss -> loss2; before and after are the n
// rows of Vp logits): neither the loss nor the first V logits may move, bit for bit. nonzero is the
// caller's count of their non-zero gradient entries, for the report.
static inline void ref_expect_padded_rows_inert(int nonzero, double loss, double loss2, const double* before,
                                                const double* after, int n, int V, int Vp) {
    int changed = 0;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < V; j++) changed += before[(size_t)r * Vp + j] != after[(size_t)r * Vp + j];
    EXPECT(loss2 == loss, "changing padded rows changed the loss: %.17g -> %.17g", loss, loss2);
    EXPECT(changed == 0, "changing padded rows changed %d of the first V logits", changed);
    printf("padded rows: %d non-zero gradients, loss %.17g -> %.17g, %d real logits changed\n",
           nonzero, loss, loss2, changed);
}

// Token t0 of row 0 was changed between two forwards (before and after: n rows of Vp logits, T per
// row): the logits of its earlier positions and of every other row must stay bitwise equal, its own
// must change. changed[3] gets the counts (earlier, own, other rows) for the caller's report.
static inline void ref_expect_causal(const double* before, const double* after, int n, int Vp, int T, int t0,
                                     int changed[3]) {
    int earlier = 0, at_t0 = 0, other_row = 0;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < Vp; j++) {
            int diff = before[(size_t)r * Vp + j] != after[(size_t)r * Vp + j];
            if (r < t0) earlier += diff;
            else if (r == t0) at_t0 += diff;
            else if (r >= T) other_row += diff;
        }
    EXPECT(earlier == 0, "causality: changing token %d changed %d logits of earlier positions", t0, earlier);
    EXPECT(at_t0 > 0, "changing token %d did not change its own logits", t0);
    EXPECT(other_row == 0, "changing a token in row 0 changed %d logits of row 1", other_row);
    changed[0] = earlier;
    changed[1] = at_t0;
    changed[2] = other_row;
}

// At init the logits are nearly 0, so the mean loss over random targets is close to log(V); the
// tests explain the band 0.05 for their model.
static inline void ref_expect_init_loss(double loss, int V) {
    double log_v = log((double)V);
    printf("init loss %.6f, log(V) %.6f, difference %.4f (band 0.05)\n", loss, log_v, loss - log_v);
    EXPECT(fabs(loss - log_v) < 0.05, "loss at init %.6f is not within 0.05 of log(V) = %.6f", loss, log_v);
}

// The losses of steps 1..steps of AdamW on one fixed batch: each must be lower than the one before,
// and the last lower than the first by more than 0.5.
static inline void ref_expect_loss_descent(const double* losses, int steps) {
    double first = losses[0], loss = losses[steps - 1], prev = INFINITY;
    int monotonic = 1;
    for (int i = 0; i < steps; i++) {
        monotonic &= losses[i] < prev;
        prev = losses[i];
    }
    printf("adamw: loss %.6f -> %.6f in %d steps\n", first, loss, steps);
    EXPECT(monotonic, "adamw: the loss did not go down at every step");
    EXPECT(loss < first - 0.5, "adamw: loss %.6f -> %.6f, expected a drop of more than 0.5", first, loss);
}

// An AdamW step with zero gradients leaves m and v at 0, so the Adam term is 0 exactly and the step only
// decays: m's parameters (before: what they were) must be before * (1 - lr wd) in the tensors whose
// table entry decays, and untouched elsewhere.
static inline void ref_expect_decay_only(const ref_model* m, const double* before, double lr, double wd) {
    for (int i = 0; i < m->spec->num_tensors; i++) {
        const ModelTensorSpec* t = &m->spec->tensors[i];
        double max_err = 0, f = t->decay ? 1.0 - lr * wd : 1.0;
        size_t off = m->tensor_offset[i];
        for (size_t j = off; j < off + m->tensor_size[i]; j++)
            max_err = fmax(max_err, fabs(m->params_memory[j] - before[j] * f));
        EXPECT(max_err < 1e-15, "adamw decay: %s should be scaled by %.3f, error %.3e", t->name, f, max_err);
    }
}
