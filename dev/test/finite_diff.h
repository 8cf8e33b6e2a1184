// finite_diff.h: the finite-difference check that the CPU reference tests share (double builds only):
// an analytic gradient element against the central difference of a scalar loss, the errors gathered
// per tensor, one pass/fail check per tensor.
#pragma once
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../../llmc/core/rand.h"
#include "testing.h"

// Central differences, h = 1e-5: truncation h^2/6 f''' ~ 1e-11, and round-off ~ 1e-16 * (sum of the
// magnitudes of the loss's terms) / h: ~1e-10 for a mean cross-entropy of ~3 (a model), ~1e-9 for
// sum(out * R) over a few hundred outputs (a layer). An element's error is |analytic - fd| /
// max(|analytic|, |fd|, floor): relative for gradients of normal size, absolute / floor for small ones,
// whose fd is mostly that noise. Each check picks its floor (FD_FLOOR, 1e-2, for the layers: the correct
// code stays below 4e-8 there, a 25th of FD_TOL; the model test says its own); a wrong formula gives
// errors of order 1e-2 .. 1, and an absolute error above 1e-8 on any element fails.
#define FD_H 1e-5
#define FD_FLOOR 1e-2
#define FD_TOL 1e-6

typedef double (*loss_fn)(void* ctx);

typedef struct {
    double floor;                      // the error's floor (fd_stats_start)
    double max_err, max_abs, max_grad; // over the elements so far
    size_t worst;                      // the element of max_err
} fd_stats;

static inline void fd_stats_start(fd_stats* s, double floor) {
    memset(s, 0, sizeof(*s));
    s->floor = floor;
}

// Folds element j into s: grad against the central difference of f over x[j] (x[j] is restored).
static inline void fd_element(fd_stats* s, double* x, size_t j, double grad, loss_fn f, void* ctx) {
    double p = x[j];
    x[j] = p + FD_H;
    double lp = f(ctx);
    x[j] = p - FD_H;
    double lm = f(ctx);
    x[j] = p;
    double fd = (lp - lm) / (2 * FD_H), diff = fabs(grad - fd);
    double err = diff / fmax(fmax(fabs(grad), fabs(fd)), s->floor);
    if (err > s->max_err) { s->max_err = err; s->worst = j; }
    s->max_abs = fmax(s->max_abs, diff);
    s->max_grad = fmax(s->max_grad, fabs(grad));
}

static inline void fd_report(const char* what, const fd_stats* s, size_t n) {
    printf("  %-24s %5zu elements: max |grad| %.3e, max abs err %.2e, max rel err %.2e (element %zu)\n",
           what, n, s->max_grad, s->max_abs, s->max_err, s->worst);
    EXPECT(s->max_err <= FD_TOL, "%s: gradient vs finite differences, max rel err %.3e at element %zu > %g",
           what, s->max_err, s->worst, FD_TOL);
    EXPECT(s->max_grad > 0, "%s: all gradients are zero", what);
}

// Every element of x (n of them, analytic gradient grad) against finite differences of f, reported as
// the one tensor what, with the error's floor `floor`.
static inline void fd_check_array(const char* what, double* x, const double* grad, size_t n, double floor, loss_fn f,
                                  void* ctx) {
    fd_stats s;
    fd_stats_start(&s, floor);
    for (size_t j = 0; j < n; j++) fd_element(&s, x, j, grad[j], f, ctx);
    fd_report(what, &s, n);
}

static inline void fill_normal(double* x, size_t n, double mean, double std, uint64_t* rng) {
    for (size_t i = 0; i < n; i++) x[i] = mean + std * rand_normal(rng);
}

static inline double max_abs_diff(const double* a, const double* b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}
