// profile.h: where a training step's GPU time goes, by kind of work (./train_gpt -profile 1).
// A CUDA event is recorded on the stream after each piece of work, tagged with its kind; at the end of
// the step the time between consecutive events is added to the kind of the later one. The events do
// not synchronise anything, so the step runs as it would without them (a few µs of CPU per mark).
// Time the GPU spent idle, waiting for the CPU to launch the next piece, lands in that next piece:
// the sum of the kinds is the GPU's wall time from the first mark to the last.
#pragma once
#include <stdio.h>
#include <string.h>
#include <cuda_runtime.h>
#include "check.h"

#define PROFILE_MAX_MARKS 16384  // the LM head in blocks marks ~6 per block: ~3000 per d12 step
#define PROFILE_MAX_KINDS 32

typedef struct {
    int on;
    int active;                              // between profile_start and profile_step_end
    int n;                                   // marks recorded this step (events ev[0..n], ev[0] the start)
    cudaEvent_t ev[PROFILE_MAX_MARKS + 1];
    int kind_of[PROFILE_MAX_MARKS + 1];      // kind of the work that ended at ev[i]
    const char* kinds[PROFILE_MAX_KINDS];    // names, in order of first appearance
    int calls[PROFILE_MAX_KINDS];            // marks per step of each kind (the last step's count)
    double ms[PROFILE_MAX_KINDS];            // total over the profiled steps
    int nkinds, steps;
} Profile;

static inline void profile_build(Profile* p, int on) {
    memset(p, 0, sizeof(*p));
    p->on = on;
    if (!on) return;
    for (int i = 0; i <= PROFILE_MAX_MARKS; i++) cuda_check(cudaEventCreate(&p->ev[i]));
}

static inline void profile_free(Profile* p) {
    if (!p->on) return;
    for (int i = 0; i <= PROFILE_MAX_MARKS; i++) cuda_check(cudaEventDestroy(p->ev[i]));
}

// Starts a step: the time up to the first mark counts from here.
static inline void profile_start(Profile* p, cudaStream_t stream) {
    if (!p || !p->on) return;
    p->n = 0;
    p->active = 1;
    cuda_check(cudaEventRecord(p->ev[0], stream));
}

// The work of `kind` launched since the previous mark ends here. `kind` must be a string literal (or
// outlive the profile): it is kept by pointer and compared by content. Outside a step (evaluation,
// sampling) marks are ignored.
static inline void profile_mark(Profile* p, const char* kind, cudaStream_t stream) {
    if (!p || !p->active) return;
    if (p->n == PROFILE_MAX_MARKS) check_fail("profile: more marks in one step than PROFILE_MAX_MARKS",
                                              "raise PROFILE_MAX_MARKS in llmc/core/profile.h");
    int k = 0;
    while (k < p->nkinds && strcmp(p->kinds[k], kind) != 0) k++;
    if (k == p->nkinds) {
        if (k == PROFILE_MAX_KINDS) check_fail("profile: more kinds than PROFILE_MAX_KINDS", "raise it in llmc/core/profile.h");
        p->kinds[p->nkinds++] = kind;
    }
    p->n++;
    p->kind_of[p->n] = k;
    cuda_check(cudaEventRecord(p->ev[p->n], stream));
}

// Ends a step: waits for its last mark and adds the intervals to their kinds.
static inline void profile_step_end(Profile* p) {
    if (!p || !p->active) return;
    p->active = 0;
    if (p->n == 0) return;
    cuda_check(cudaEventSynchronize(p->ev[p->n]));
    memset(p->calls, 0, sizeof(p->calls));
    for (int i = 1; i <= p->n; i++) {
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]));
        p->ms[p->kind_of[i]] += ms;
        p->calls[p->kind_of[i]]++;
    }
    p->steps++;
}

// A table of ms per step by kind, largest first, with the share of the total.
static inline void profile_print(const Profile* p, FILE* f) {
    if (!p->on || p->steps == 0) return;
    double total = 0.0;
    int order[PROFILE_MAX_KINDS];
    for (int k = 0; k < p->nkinds; k++) { total += p->ms[k]; order[k] = k; }
    for (int a = 1; a < p->nkinds; a++)  // insertion sort by time, descending
        for (int b = a; b > 0 && p->ms[order[b]] > p->ms[order[b - 1]]; b--) {
            int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
        }
    fprintf(f, "profile: GPU time per step by kind of work, mean of %d steps\n", p->steps);
    fprintf(f, "  %-26s %10s %7s %7s\n", "kind", "ms/step", "share", "calls");
    for (int i = 0; i < p->nkinds; i++) {
        int k = order[i];
        fprintf(f, "  %-26s %10.2f %6.1f%% %7d\n", p->kinds[k], p->ms[k] / p->steps, 100.0 * p->ms[k] / total, p->calls[k]);
    }
    fprintf(f, "  %-26s %10.2f\n", "total", total / p->steps);
}
