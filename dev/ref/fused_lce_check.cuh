// fused_lce_check.cuh: runs the LM head of llmc/head/fused_lce.cuh on one test case and compares every
// output with the CPU fp64 reference (fused_lce_ref.h). Shared by the playground dev/cuda/fused_lce.cu
// and the GPU test dev/test/test_fused_lce.cu, so both check the same way.
#pragma once
#include "../../llmc/head/fused_lce.cuh"
#include "fused_lce_ref.h"

// Tolerances against fp64, for bf16 inputs and fp32 accumulation (fused head):
//  lse: fp32 dot products of length C and an fp32 log-sum-exp: ~1e-6 relative; 2e-5 allows C = 4096.
//  loss rows: lse − s_t cancels when the row is well predicted; relative to |ref| + 1e-3·max|ref|
//    (the floor of flce_ref_err_stats), 1e-4.
//  dx, dW: the gradient is rounded once to bf16 (up to 2^-8 relative per element: bf16 has 8 significant
//    bits) before the GEMMs, and dx is stored in bf16 (another 2^-8 of itself). The rounding of the
//    dominant target term −scale is the same in every row, so the norm-wise error ‖got − ref‖/‖ref‖ can
//    reach that bound rather than average out: dW (fp32 out) <= 2^-8 = 3.9e-3, dx <= 2·2^-8 = 7.8e-3.
//    PyTorch eager measures ~2.4e-3 (dx) and ~1.5e-3 (dW) on its shapes. The largest single error is a
//    tail of the distribution: 1.5e-2 of max|ref| (max_abs / max_ref).
//  dW against the reference that rounds the gradient to bf16 exactly like the kernel: only rare
//    rounding flips remain, so ‖got − ref_g‖/‖ref_g‖ <= 1e-3 (the sharp check of everything else).
// A wrong formula (a missing rescale, a wrong scale, a lost chunk or row) shows up as errors of order 1.
typedef struct { FlceTolerance max; double dx_norm, dW_norm; } FlceTolerances;
static const FlceTolerances FLCE_TOL = {{2e-5, 1e-4, 1.5e-2, 1.5e-2}, 7.8e-3, 3.9e-3};
static const double FLCE_TOL_DW_G = 1e-3;
static const FlceTolerances FLCE_TOL_UNFUSED = {{5e-3, 1e-2, 3e-2, 3e-2}, 1e-2, 1e-2};

typedef struct { int N, C, V, Vp; FlceOptions opt; int ignore_every; const char* what; } FlceCase;

// Host copies of one case's inputs, values bf16-representable so that GPU and reference read the same.
typedef struct { float *x, *W, *dW0; int* t; double* dloss_rows; } FlceInputs;

// x ~ U(-√3, √3) (unit variance); W scaled so that logits have a std of ~3, as in a trained head; dW starts
// non-zero because the head adds into the tied embedding's gradient. Every ignore_every-th row is ignored.
static FlceInputs flce_inputs_make(const FlceCase* cs, uint64_t seed) {
    int N = cs->N, C = cs->C, V = cs->V, Vp = cs->Vp;
    FlceInputs in;
    in.x = (float*)malloc_check((size_t)N * C * sizeof(float));
    in.W = (float*)malloc_check((size_t)Vp * C * sizeof(float));
    in.dW0 = (float*)malloc_check((size_t)Vp * C * sizeof(float));
    in.t = (int*)malloc_check((size_t)N * sizeof(int));
    in.dloss_rows = (double*)malloc_check((size_t)N * sizeof(double));
    float wscale = 3.0f / sqrtf((float)C) * 1.7320508f;
    for (size_t i = 0; i < (size_t)N * C; i++) in.x[i] = bf16_round(1.7320508f * (2.0f * rand_uniform(&seed) - 1.0f));
    for (size_t i = 0; i < (size_t)Vp * C; i++) in.W[i] = bf16_round(wscale * (2.0f * rand_uniform(&seed) - 1.0f));
    for (size_t i = 0; i < (size_t)Vp * C; i++) in.dW0[i] = 0.01f * (2.0f * rand_uniform(&seed) - 1.0f);
    for (int i = 0; i < N; i++) {
        int ignored = cs->ignore_every && i % cs->ignore_every == 0;
        in.t[i] = ignored ? cs->opt.ignore_index : (int)(rand_uniform(&seed) * V) % V;
        in.dloss_rows[i] = (float)(0.5 + rand_uniform(&seed)) / N;  // per-token weights, exact in float
    }
    return in;
}

static void flce_inputs_free(FlceInputs* in) {
    free(in->x); free(in->W); free(in->dW0); free(in->t); free(in->dloss_rows);
}

// Device copies of a case's inputs and the head's gradient outputs.
typedef struct { bf16 *x, *W, *dx; float *dW, *dloss_rows; int* t; } FlceDevice;

static bf16* flce_upload_bf16(const float* h, size_t n) {
    uint16_t* bits = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) bits[i] = bf16_bits_from_float(h[i]);
    bf16* d;
    cuda_check(cudaMalloc(&d, n * sizeof(bf16)));
    cuda_check(cudaMemcpy(d, bits, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(bits);
    return d;
}

static FlceDevice flce_device_make(const FlceCase* cs, const FlceInputs* in) {
    int N = cs->N, C = cs->C, Vp = cs->Vp;
    FlceDevice d;
    d.x = flce_upload_bf16(in->x, (size_t)N * C);
    d.W = flce_upload_bf16(in->W, (size_t)Vp * C);
    cuda_check(cudaMalloc(&d.dx, (size_t)N * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&d.dW, (size_t)Vp * C * sizeof(float)));
    cuda_check(cudaMalloc(&d.t, (size_t)N * sizeof(int)));
    cuda_check(cudaMalloc(&d.dloss_rows, (size_t)N * sizeof(float)));
    cuda_check(cudaMemcpy(d.t, in->t, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    float* f = (float*)malloc_check((size_t)N * sizeof(float));
    for (int i = 0; i < N; i++) f[i] = (float)in->dloss_rows[i];
    cuda_check(cudaMemcpy(d.dloss_rows, f, (size_t)N * sizeof(float), cudaMemcpyHostToDevice));
    free(f);
    cuda_check(cudaDeviceSynchronize());  // see flce_device_reset
    return d;
}

// Before each run: dW back to dW0, dx poisoned (0xffff is a bf16 NaN) so that unwritten rows fail. The
// copy and the memset run on the legacy stream, which the head's non-blocking stream does not wait for
// (and a pageable copy may return before its data has landed): hence the synchronisation.
static void flce_device_reset(FlceDevice* d, const FlceCase* cs, const FlceInputs* in) {
    cuda_check(cudaMemcpy(d->dW, in->dW0, (size_t)cs->Vp * cs->C * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(d->dx, 0xff, (size_t)cs->N * cs->C * sizeof(bf16)));
    cuda_check(cudaDeviceSynchronize());
}

static void flce_device_free(FlceDevice* d) {
    cuda_check(cudaFree(d->x)); cuda_check(cudaFree(d->W)); cuda_check(cudaFree(d->dx));
    cuda_check(cudaFree(d->dW)); cuda_check(cudaFree(d->t)); cuda_check(cudaFree(d->dloss_rows));
}

// Host copies of the head's outputs after a run.
typedef struct { float loss; float *loss_rows, *lse, *dx, *dW; } FlceOutputs;

static FlceOutputs flce_outputs_download(const FusedLce* h, const FlceDevice* d, const FlceCase* cs, int grads) {
    int N = cs->N, C = cs->C, Vp = cs->Vp;
    FlceOutputs o;
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaMemcpy(&o.loss, h->loss, sizeof(float), cudaMemcpyDeviceToHost));
    o.loss_rows = (float*)malloc_check((size_t)N * sizeof(float));
    o.lse = (float*)malloc_check((size_t)N * sizeof(float));
    cuda_check(cudaMemcpy(o.loss_rows, h->loss_rows, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(o.lse, h->lse, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost));
    o.dx = o.dW = NULL;
    if (grads) {
        uint16_t* bits = (uint16_t*)malloc_check((size_t)N * C * sizeof(uint16_t));
        cuda_check(cudaMemcpy(bits, d->dx, (size_t)N * C * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        o.dx = (float*)malloc_check((size_t)N * C * sizeof(float));
        for (size_t i = 0; i < (size_t)N * C; i++) o.dx[i] = bf16_bits_to_float(bits[i]);
        free(bits);
        o.dW = (float*)malloc_check((size_t)Vp * C * sizeof(float));
        cuda_check(cudaMemcpy(o.dW, d->dW, (size_t)Vp * C * sizeof(float), cudaMemcpyDeviceToHost));
    }
    return o;
}

static void flce_outputs_free(FlceOutputs* o) { free(o->loss_rows); free(o->lse); free(o->dx); free(o->dW); }

enum { FLCE_MODE_TRAIN, FLCE_MODE_FORWARD, FLCE_MODE_BACKWARD };  // which entry point a check runs

// Runs `mode` of head h on the case and compares with the reference. Returns 1 when within FLCE_TOL.
static int flce_check_mode(FusedLce* h, int mode, const FlceCase* cs, const FlceInputs* in, FlceDevice* d,
                           const GpuContext* ctx) {
    int N = cs->N, C = cs->C, V = cs->V, Vp = cs->Vp;
    flce_device_reset(d, cs, in);
    if (mode == FLCE_MODE_TRAIN) fused_lce_forward_backward(h, d->dx, d->dW, 1.0f, d->x, d->W, d->t, N, ctx);
    else if (mode == FLCE_MODE_FORWARD) fused_lce_forward(h, d->x, d->W, d->t, N, ctx);
    else fused_lce_backward(h, d->dx, d->dW, d->dloss_rows, d->x, d->W, d->t, N, ctx);
    int grads = mode != FLCE_MODE_FORWARD;
    FlceOutputs o = flce_outputs_download(h, d, cs, grads);
    FlceRefResult ref = flce_ref_forward_backward(in->x, in->W, in->t, N, C, V, Vp, cs->opt, 1.0,
                                                  mode == FLCE_MODE_BACKWARD ? in->dloss_rows : NULL, in->dW0);
    static const char* names[] = {"forward+backward", "forward only", "backward, per-row dloss"};
    char title[256];
    snprintf(title, sizeof(title), "%s [%s]", cs->what, names[mode]);
    const FlceTolerances* tol = h->cfg.path != FLCE_PATH_UNFUSED ? &FLCE_TOL : &FLCE_TOL_UNFUSED;
    int ok = flce_ref_check_outputs(title, &ref, tol->max, o.loss, o.loss_rows, o.lse, o.dx, o.dW, in->dW0, N, C, V, Vp);
    if (grads) {
        double ex = flce_ref_err_stats(o.dx, ref.dx, NULL, (size_t)N * C).l2_rel;
        double ew = flce_ref_err_stats(o.dW, ref.dW, in->dW0, (size_t)V * C).l2_rel;
        int nok = ex <= tol->dx_norm && ew <= tol->dW_norm;
        printf("  norm-wise relative error: dx %.2e, dW %.2e (bounds %.1e, %.1e; torch eager: ~2.4e-3, ~1.5e-3)%s\n",
               ex, ew, tol->dx_norm, tol->dW_norm, nok ? "" : "  FAILED");
        ok &= nok;
        if (h->cfg.path == FLCE_PATH_STAGED) {  // the sharp check: the staged path's own roundings
            double* dWs = flce_ref_staged_dw(in->x, in->W, in->t, ref.lse, N, C, V, Vp, cs->opt, 1.0,
                                             mode == FLCE_MODE_BACKWARD ? in->dloss_rows : NULL, in->dW0,
                                             FLCE_STAGED_GAP);
            if (dWs) {
                double eg = flce_ref_err_stats(o.dW, dWs, in->dW0, (size_t)V * C).l2_rel;
                printf("  dW vs reference with the staged roundings: %.2e (bound %.0e)%s\n", eg, FLCE_TOL_DW_G,
                       eg <= FLCE_TOL_DW_G ? "" : "  FAILED");
                ok &= eg <= FLCE_TOL_DW_G;
                free(dWs);
            } else {
                printf("  (rows past the restage gap: no sharp check)\n");
            }
        } else if (h->cfg.path != FLCE_PATH_UNFUSED) {  // the sharp check: the same bf16 rounding of the gradient as the kernel
            FlceRefResult rg = flce_ref_forward_backward_g(in->x, in->W, in->t, N, C, V, Vp, cs->opt, 1.0,
                                                           mode == FLCE_MODE_BACKWARD ? in->dloss_rows : NULL, in->dW0, 1);
            double eg = flce_ref_err_stats(o.dW, rg.dW, in->dW0, (size_t)V * C).l2_rel;
            printf("  dW vs reference with bf16-rounded gradient: %.2e (bound %.0e)%s\n", eg, FLCE_TOL_DW_G,
                   eg <= FLCE_TOL_DW_G ? "" : "  FAILED");
            ok &= eg <= FLCE_TOL_DW_G;
            flce_ref_result_free(&rg);
        }
    }
    flce_ref_result_free(&ref);
    flce_outputs_free(&o);
    return ok;
}
