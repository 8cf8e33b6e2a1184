// fused_lce_check.cuh: runs the LM head of llmc/head/fused_lce.cuh on one test case and compares every
// output with the CPU fp64 reference (fused_lce_ref.h). Shared by the playground dev/cuda/fused_lce.cu
// and the GPU test dev/test/head/test_fused_lce.cu, so both check the same way.
#pragma once
#include "../../llmc/head/fused_lce.cuh"
#include "fused_lce_ref.h"

// Tolerances against fp64, for bf16 inputs and fp32 accumulation (fused head):
//  lse: fp32 dot products of length C and an fp32 log-sum-exp: ~1e-6 relative; 2e-5 allows C = 4096.
//  loss rows: lse − s_t cancels when the row is well predicted; relative to |ref| + 1e-3·max|ref|
//    (the floor of fused_lce_ref_err_stats), 1e-4.
//  dx, dW: the gradient is rounded once to bf16 (up to 2^-8 relative per element: bf16 has 8 significant
//    bits) before the GEMMs, and dx is stored in bf16 (another 2^-8 of itself). The rounding of the
//    dominant target term −scale is the same in every row, so the norm-wise error ‖got − ref‖/‖ref‖ can
//    reach that bound rather than average out: dW (fp32 out) <= 2^-8 = 3.9e-3, dx <= 2·2^-8 = 7.8e-3.
//    PyTorch eager measures ~2.4e-3 (dx) and ~1.5e-3 (dW) on its shapes. The largest single error is a
//    tail of the distribution: 1.5e-2 of max|ref| (max_abs / max_ref).
//  dW against the reference that rounds the gradient to bf16 exactly like the kernel: only rare
//    rounding flips remain, so ‖got − ref_g‖/‖ref_g‖ <= 1e-3 (the sharp check of everything else).
// A wrong formula (a missing rescale, a wrong scale, a lost chunk or row) shows up as errors of order 1.
typedef struct { FusedLceTolerance max; double dx_norm, dW_norm; } FusedLceTolerances;
static const FusedLceTolerances FUSED_LCE_TOL = {{2e-5, 1e-4, 1.5e-2, 1.5e-2}, 7.8e-3, 3.9e-3};
static const double FUSED_LCE_TOL_DW_G = 1e-3;
static const FusedLceTolerances FUSED_LCE_TOL_UNFUSED = {{5e-3, 1e-2, 3e-2, 3e-2}, 1e-2, 1e-2};

typedef struct { int N, C, V, Vp; FusedLceOptions opt; int ignore_every; const char* what; } FusedLceCase;

// Host copies of one case's inputs, values bf16-representable so that GPU and reference read the same.
typedef struct { float *x, *W, *dW0; int* t; double* dloss_rows; } FusedLceInputs;

// x ~ U(-√3, √3) (unit variance); W scaled so that logits have a std of ~3, as in a trained head; dW starts
// non-zero because the head adds into the tied embedding's gradient. Every ignore_every-th row is ignored.
static FusedLceInputs fused_lce_inputs_make(const FusedLceCase* cs, uint64_t seed) {
    int N = cs->N, C = cs->C, V = cs->V, Vp = cs->Vp;
    FusedLceInputs in;
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

static void fused_lce_inputs_free(FusedLceInputs* in) {
    free(in->x); free(in->W); free(in->dW0); free(in->t); free(in->dloss_rows);
}

// Device copies of a case's inputs and the head's gradient outputs.
typedef struct { bf16 *x, *W, *dx; float *dW, *dloss_rows; int* t; } FusedLceDevice;

static bf16* fused_lce_upload_bf16(const float* h, size_t n) {
    uint16_t* bits = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) bits[i] = bf16_bits_from_float(h[i]);
    bf16* d;
    cuda_check(cudaMalloc(&d, n * sizeof(bf16)));
    cuda_check(cudaMemcpy(d, bits, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(bits);
    return d;
}

static FusedLceDevice fused_lce_device_make(const FusedLceCase* cs, const FusedLceInputs* in) {
    int N = cs->N, C = cs->C, Vp = cs->Vp;
    FusedLceDevice d;
    d.x = fused_lce_upload_bf16(in->x, (size_t)N * C);
    d.W = fused_lce_upload_bf16(in->W, (size_t)Vp * C);
    cuda_check(cudaMalloc(&d.dx, (size_t)N * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&d.dW, (size_t)Vp * C * sizeof(float)));
    cuda_check(cudaMalloc(&d.t, (size_t)N * sizeof(int)));
    cuda_check(cudaMalloc(&d.dloss_rows, (size_t)N * sizeof(float)));
    cuda_check(cudaMemcpy(d.t, in->t, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    float* f = (float*)malloc_check((size_t)N * sizeof(float));
    for (int i = 0; i < N; i++) f[i] = (float)in->dloss_rows[i];
    cuda_check(cudaMemcpy(d.dloss_rows, f, (size_t)N * sizeof(float), cudaMemcpyHostToDevice));
    free(f);
    cuda_check(cudaDeviceSynchronize());  // see fused_lce_device_reset
    return d;
}

// Before each run: dW back to dW0, dx poisoned (0xffff is a bf16 NaN) so that unwritten rows fail. The
// copy and the memset run on the legacy stream, which the head's non-blocking stream does not wait for
// (and a pageable copy may return before its data has landed): hence the synchronisation.
static void fused_lce_device_reset(FusedLceDevice* d, const FusedLceCase* cs, const FusedLceInputs* in) {
    cuda_check(cudaMemcpy(d->dW, in->dW0, (size_t)cs->Vp * cs->C * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(d->dx, 0xff, (size_t)cs->N * cs->C * sizeof(bf16)));
    cuda_check(cudaDeviceSynchronize());
}

static void fused_lce_device_free(FusedLceDevice* d) {
    cuda_check(cudaFree(d->x)); cuda_check(cudaFree(d->W)); cuda_check(cudaFree(d->dx));
    cuda_check(cudaFree(d->dW)); cuda_check(cudaFree(d->t)); cuda_check(cudaFree(d->dloss_rows));
}

// Host copies of the head's outputs after a run.
typedef struct { float loss; float *loss_rows, *lse, *dx, *dW; } FusedLceOutputs;

static FusedLceOutputs fused_lce_outputs_download(const FusedLce* h, const FusedLceDevice* d, const FusedLceCase* cs, int grads) {
    int N = cs->N, C = cs->C, Vp = cs->Vp;
    FusedLceOutputs o;
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

static void fused_lce_outputs_free(FusedLceOutputs* o) { free(o->loss_rows); free(o->lse); free(o->dx); free(o->dW); }

enum { FUSED_LCE_MODE_TRAIN, FUSED_LCE_MODE_FORWARD, FUSED_LCE_MODE_BACKWARD };  // which entry point a check runs

// Runs `mode` of head h on the case and compares with the reference. Returns 1 when within FUSED_LCE_TOL.
static int fused_lce_check_mode(FusedLce* h, int mode, const FusedLceCase* cs, const FusedLceInputs* in, FusedLceDevice* d,
                                const GpuContext* ctx) {
    int N = cs->N, C = cs->C, V = cs->V, Vp = cs->Vp;
    fused_lce_device_reset(d, cs, in);
    if (mode == FUSED_LCE_MODE_TRAIN) fused_lce_forward_backward(h, d->dx, d->dW, 1.0f, d->x, d->W, d->t, N, ctx);
    else if (mode == FUSED_LCE_MODE_FORWARD) fused_lce_forward(h, d->x, d->W, d->t, N, ctx);
    else fused_lce_backward(h, d->dx, d->dW, d->dloss_rows, d->x, d->W, d->t, N, ctx);
    int grads = mode != FUSED_LCE_MODE_FORWARD;
    FusedLceOutputs o = fused_lce_outputs_download(h, d, cs, grads);
    FusedLceRefResult ref = fused_lce_ref_forward_backward(in->x, in->W, in->t, N, C, V, Vp, cs->opt, 1.0,
                                                           mode == FUSED_LCE_MODE_BACKWARD ? in->dloss_rows : NULL, in->dW0);
    static const char* names[] = {"forward+backward", "forward only", "backward, per-row dloss"};
    char title[256];
    snprintf(title, sizeof(title), "%s [%s]", cs->what, names[mode]);
    const FusedLceTolerances* tol = h->cfg.path != FUSED_LCE_PATH_UNFUSED ? &FUSED_LCE_TOL : &FUSED_LCE_TOL_UNFUSED;
    int ok = fused_lce_ref_check_outputs(title, &ref, tol->max, o.loss, o.loss_rows, o.lse, o.dx, o.dW, in->dW0, N, C, V, Vp);
    if (grads) {
        double ex = fused_lce_ref_err_stats(o.dx, ref.dx, NULL, (size_t)N * C).l2_rel;
        double ew = fused_lce_ref_err_stats(o.dW, ref.dW, in->dW0, (size_t)V * C).l2_rel;
        int nok = ex <= tol->dx_norm && ew <= tol->dW_norm;
        printf("  norm-wise relative error: dx %.2e, dW %.2e (bounds %.1e, %.1e; torch eager: ~2.4e-3, ~1.5e-3)%s\n",
               ex, ew, tol->dx_norm, tol->dW_norm, nok ? "" : "  FAILED");
        ok &= nok;
        if (h->cfg.path == FUSED_LCE_PATH_STAGED) {  // the sharp check: the staged path's own roundings
            double* dWs = fused_lce_ref_staged_dw(in->x, in->W, in->t, ref.lse, N, C, V, Vp, cs->opt, 1.0,
                                                  mode == FUSED_LCE_MODE_BACKWARD ? in->dloss_rows : NULL, in->dW0,
                                                  FUSED_LCE_STAGED_GAP);
            if (dWs) {
                double eg = fused_lce_ref_err_stats(o.dW, dWs, in->dW0, (size_t)V * C).l2_rel;
                printf("  dW vs reference with the staged roundings: %.2e (bound %.0e)%s\n", eg, FUSED_LCE_TOL_DW_G,
                       eg <= FUSED_LCE_TOL_DW_G ? "" : "  FAILED");
                ok &= eg <= FUSED_LCE_TOL_DW_G;
                free(dWs);
            } else {
                printf("  (rows past the restage gap: no sharp check)\n");
            }
        } else if (h->cfg.path != FUSED_LCE_PATH_UNFUSED) {  // the sharp check: the same bf16 rounding of the gradient as the kernel
            FusedLceRefResult rg = fused_lce_ref_forward_backward_g(in->x, in->W, in->t, N, C, V, Vp, cs->opt, 1.0,
                                                                    mode == FUSED_LCE_MODE_BACKWARD ? in->dloss_rows : NULL, in->dW0, 1);
            double eg = fused_lce_ref_err_stats(o.dW, rg.dW, in->dW0, (size_t)V * C).l2_rel;
            printf("  dW vs reference with bf16-rounded gradient: %.2e (bound %.0e)%s\n", eg, FUSED_LCE_TOL_DW_G,
                   eg <= FUSED_LCE_TOL_DW_G ? "" : "  FAILED");
            ok &= eg <= FUSED_LCE_TOL_DW_G;
            fused_lce_ref_result_free(&rg);
        }
    }
    fused_lce_ref_result_free(&ref);
    fused_lce_outputs_free(&o);
    return ok;
}
