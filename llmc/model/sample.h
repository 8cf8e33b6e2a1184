// sample.h: drawing the next token from a row of logits on the host, for the trainer's text samples
// (llmc/train/evaluate.cuh): greedy at temperature 0, else softmax(logits / temperature) restricted to the
// top_k largest logits. Plain C, so that dev/test/model/test_sample.c checks it without a GPU. The random
// numbers come from the caller's rand.h state, which the trainer keeps in its checkpoints.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../core/rand.h"

static int sample_compare_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// One token from fp32 logits (V,): the argmax (the first, on ties) at temperature 0, else a draw from
// softmax(logits / temperature) over the top_k largest logits (0 or >= V: all; ties at the k-th value are
// all kept). sorted (V,) fp32 is scratch. The exponentials are taken relative to the largest logit, in
// double, so no logit overflows them. Advances *rng by one step, at temperature 0 not at all.
static int sample_token(const float* logits, int V, float temperature, int top_k, float* sorted, uint64_t* rng) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (temperature == 0.0f) return best;
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(sorted, logits, (size_t)V * sizeof(float));
        qsort(sorted, (size_t)V, sizeof(float), sample_compare_desc);
        cut = sorted[top_k - 1];
    }
    double mx = logits[best], total = 0.0;
    for (int j = 0; j < V; j++)
        if (logits[j] >= cut) total += exp((logits[j] - mx) / temperature);
    double u = ((double)(rand_next(rng) >> 11) + 0.5) / 9007199254740992.0 * total, acc = 0.0;
    for (int j = 0; j < V; j++) {
        if (logits[j] < cut) continue;
        acc += exp((logits[j] - mx) / temperature);
        if (acc >= u) return j;
    }
    return best;  // u within rounding of the total
}
