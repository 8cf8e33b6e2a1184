// test_lr_schedule.c: the trainer's learning-rate schedule (llmc/optim/lr_schedule.h), on the CPU, against
// values worked out here in double from the schedule's definition:
//   - warmup: step s < warmup is at peak · (s+1)/warmup: the first step is not at 0, the last at the peak;
//   - cosine: the first step after warmup at the peak, the last (steps-1) at peak · final_frac, the middle
//     of the decay halfway, every step on peak_min + (peak - peak_min)·(1 + cos(π·frac))/2, never rising;
//   - linear: equal decrements from the peak to peak · final_frac;
//   - no warmup; a decay of one step (at the final rate) and of two; final_frac 1 (constant after warmup);
//   - the rate depends on the step alone (a resumed run's schedule is the uninterrupted run's).
// Tolerance: 1e-6 of the peak, the float arithmetic's few roundings (the formula runs in float); of the
// peak, not of the value, because near the end of a cosine decay to 0, 1 + cos(π·frac) cancels.
#include <math.h>
#include "../../../llmc/optim/lr_schedule.h"
#include "../testing.h"

#define RTOL 1e-6

static int close_to(double got, double want, double peak) { return fabs(got - want) <= RTOL * peak; }

// every step of one schedule against the definition; returns how many steps disagree
static int check_schedule(float peak, int warmup, int steps, float final_frac, int linear) {
    int bad = 0;
    double lr_min = (double)peak * final_frac, prev = INFINITY;
    for (int s = 0; s < steps; s++) {
        double want;
        if (s < warmup) {
            want = (double)peak * (s + 1) / warmup;
        } else {
            int span = steps - warmup;
            double frac = span > 1 ? (double)(s - warmup) / (span - 1) : 1.0;
            want = linear ? peak - (peak - lr_min) * frac : lr_min + (peak - lr_min) * 0.5 * (1.0 + cos(M_PI * frac));
        }
        float got = lr_schedule(peak, warmup, steps, final_frac, linear, s);
        if (!close_to(got, want, peak)) {
            if (bad++ < 3)
                fprintf(stderr, "  peak %g warmup %d steps %d final %g %s: step %d gives %.9g, expected %.9g\n", peak,
                        warmup, steps, final_frac, linear ? "linear" : "cosine", s, got, want);
        }
        if (s >= warmup && got > prev * (1 + RTOL)) {
            if (bad++ < 3) fprintf(stderr, "  step %d rises during the decay: %.9g after %.9g\n", s, got, prev);
        }
        if (s >= warmup) prev = got;
    }
    return bad;
}

// peak 1e-3, final 0.1 of it: the rate at `step` is `want`
static void expect_at(const char* what, int warmup, int steps, int linear, int step, double want) {
    float got = lr_schedule(1e-3f, warmup, steps, 0.1f, linear, step);
    EXPECT(close_to(got, want, 1e-3), "%s: %g, expected %g", what, got, want);
}

int main(void) {
    // the shape of a default run: 1e-3, 10 steps of warmup, 300 steps, to 0.1 of the peak
    EXPECT(check_schedule(1e-3f, 10, 300, 0.1f, 0) == 0, "cosine, warmup 10, 300 steps: steps off the definition");
    EXPECT(check_schedule(1e-3f, 10, 300, 0.1f, 1) == 0, "linear, warmup 10, 300 steps: steps off the definition");
    EXPECT(check_schedule(6e-4f, 0, 51, 0.0f, 0) == 0, "cosine without warmup, to 0: steps off the definition");
    EXPECT(check_schedule(3e-4f, 5, 6, 0.1f, 0) == 0, "a decay of one step: steps off the definition");
    EXPECT(check_schedule(3e-4f, 5, 7, 0.1f, 0) == 0, "a decay of two steps: steps off the definition");
    EXPECT(check_schedule(3e-4f, 3, 20, 1.0f, 0) == 0, "final_frac 1: steps off the definition");

    // the landmarks, spelt out (peak 1e-3, final 0.1 of it); 301 steps after 10 of warmup: step 155 is
    // frac 0.5, halfway between peak and floor
    expect_at("warmup's first step", 10, 300, 0, 0, 1e-4);
    expect_at("warmup's last step (the peak)", 10, 300, 0, 9, 1e-3);
    expect_at("the decay's first step (the peak)", 10, 300, 0, 10, 1e-3);
    expect_at("the last step (0.1 of the peak)", 10, 300, 0, 299, 1e-4);
    expect_at("cosine's middle", 10, 301, 0, 155, 5.5e-4);
    expect_at("linear's middle", 10, 301, 1, 155, 5.5e-4);
    float p = 1e-3f;
    // cosine stays above linear in the decay's first half and below it in the second
    EXPECT(lr_schedule(p, 0, 101, 0.0f, 0, 25) > lr_schedule(p, 0, 101, 0.0f, 1, 25) &&
           lr_schedule(p, 0, 101, 0.0f, 0, 75) < lr_schedule(p, 0, 101, 0.0f, 1, 75),
           "cosine against linear at a quarter and three quarters of the decay");
    EXPECT(lr_schedule(p, 5, 6, 0.1f, 0, 5) == lr_schedule(p, 5, 6, 0.1f, 1, 5), "a one-step decay: cosine and linear agree");
    return test_summary("test_lr_schedule");
}
