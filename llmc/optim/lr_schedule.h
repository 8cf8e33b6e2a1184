// lr_schedule.h: the learning rate of each optimizer step: a linear warmup to the peak over `warmup`
// steps, then a cosine (or linear) decay that reaches peak · final_frac at the last step. A pure function
// of the step, so a resumed run follows the uninterrupted run's schedule without keeping any state.
// Plain C: dev/test/optim/test_lr_schedule.c checks it without a GPU.
#pragma once
#include <math.h>

// step = 0 .. steps-1. Warmup: peak · (step+1)/warmup, so its last step is at the peak. Decay: frac runs
// from 0 at step `warmup` to 1 at step steps-1 (1 throughout when the decay has one step or none).
static inline float lr_schedule(float peak, int warmup, int steps, float final_frac, int linear, int step) {
    if (step < warmup) return peak * (float)(step + 1) / (float)warmup;
    float lr_min = peak * final_frac;
    int span = steps - warmup;
    float frac = span > 1 ? (float)(step - warmup) / (float)(span - 1) : 1.0f;
    if (linear) return peak - (peak - lr_min) * frac;
    return lr_min + (peak - lr_min) * 0.5f * (1.0f + cosf(3.14159265f * frac));
}
