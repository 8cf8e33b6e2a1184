// test_attention_rope.cu: GPU test of RoPE in attention (llmc/layers/rope.cuh's table), in each family of kernels:
//   mma.sync (llmc/flash_attention{,_backward}.cuh): fused, a pass rotates the k heads, the forward kernel
//            rotates each query tile as it loads it and writes it back, the backward kernels rotate dq
//            and dk back before writing them;
//   sm90     (llmc/flash_attention_sm90{,_backward}.cuh, on an sm_90 GPU in an sm_90a build): a pass rotates q and k,
//            the backward kernels rotate dq and dk back;
//   layer    (llmc/attention/attention.cuh at hs = 32 and 96: the simple kernels) a pass on each side.
//   1. Against the CPU fp64 reference (dev/ref/attention_check.cuh's att_check_rope: the reference
//      rotates q and k with dev/ref/ref_layers.h's RoPE in double, runs attention, and rotates the
//      gradients back): out, lse, dq, dk, dv at hs ∈ {64, 128}, (NH, NKV) ∈ {(4, 1), (4, 2), (4, 4),
//      (8, 2)}, T ∈ {1, 63, 64, 65, 200}, B ∈ {1, 2}, θ ∈ {1e4, 5e5}, T = 1000 (16 tiles of positions,
//      angles up to ~1000 rad) at θ = 1e4, for mma.sync and sm90; the layer at hs = 32 and 96 with
//      NKV ∈ {1, 4}. Tolerances are attention_check.cuh's (relative L2 1e-2; lse 1e-2 absolute,
//      reasoned there: the reference rotates in double, the GPU in fp32, and an element near a rounding
//      midpoint rounds to the other bf16); the reference rounds its rotated q and k to bf16, as the layer
//      stores them. A wrong position, pair or sign in any of the places that rotate gives O(1) errors.
//   2. Against the unfused path of the same kernels (rope_forward over qkv in place, the kernels without
//      RoPE, then rope_backward over dqkv): qkv after the forward (the rotated q and k the backward
//      reads), out and lse bitwise equal (the same rotation, llmc/layers/rope.cuh's rope_rotate8, on the same values, then
//      the same kernel arithmetic), dv bitwise equal (it does not go through a rotation), dq and dk
//      within relative L2 1e-2 of each other (the unfused path rounds them to bf16 once more, before
//      rotating them back: ~1e-3 expected).
//   3. Determinism: every backward runs twice and must be bitwise identical.
// A failed check prints the case and the error; the last line is `test_attention_rope: N passed, M failed`.
#include "../../../llmc/attention/attention.cuh"
#include "../../ref/attention_check.cuh"
#include "../gpu_testing.cuh"
#include "../testing.h"

// The kernels under test: the mma.sync flash kernels (RoPE fused as llmc/attention/flash_attention.cuh says), the
// sm_90a ones (llmc/flash_attention_sm90{,_backward}.cuh: q and k rotated by the pass, dq and dk rotated back in the
// backward's registers), or whatever the layer picks (the simple kernels at other head sizes).
enum { IMPL_LAYER, IMPL_MMA, IMPL_SM90 };
static const char* IMPL_NAMES[] = {"layer", "mma.sync", "sm90"};
typedef struct { const float* table; const GpuContext* ctx; int impl; } RopeSelf;

static void impl_fwd(const RopeSelf* r, bf16* out, float* lse, bf16* qkv, const float* rope, int B, int T, int C,
                     int NH, int NKV) {
    if (r->impl == IMPL_MMA) {
        flash_attention_forward(out, lse, qkv, rope, B, T, C, NH, NKV, r->ctx->stream);
    } else if (r->impl == IMPL_SM90) {
        if (rope) rope_forward(qkv, rope, B, T, NH, NKV, C / NH, r->ctx);
        flash_sm90_forward(out, lse, qkv, B, T, C, NH, NKV, r->ctx->stream);
    } else {
        attention_forward(out, lse, qkv, rope, B, T, C, NH, NKV, r->ctx);
    }
}
static void impl_bwd(const RopeSelf* r, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                     const float* rope, const float* lse, int B, int T, int C, int NH, int NKV) {
    if (r->impl == IMPL_MMA) flash_attention_backward(dqkv, D, dout, out, qkv, rope, lse, B, T, C, NH, NKV, r->ctx->stream);
    else if (r->impl == IMPL_SM90)
        flash_sm90_backward(dqkv, D, dout, out, qkv, rope, lse, NULL, B, T, C, NH, NKV, r->ctx->stream);
    else attention_backward(dqkv, D, dout, out, qkv, rope, lse, NULL, NULL, B, T, C, NH, NKV, r->ctx);
}

static void fused_fwd(void* self, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                      cudaStream_t) {
    RopeSelf* r = (RopeSelf*)self;
    impl_fwd(r, out, lse, qkv, r->table, B, T, C, NH, NKV);
}
static void fused_bwd(void* self, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                      const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t) {
    RopeSelf* r = (RopeSelf*)self;
    impl_bwd(r, dqkv, D, dout, out, qkv, r->table, lse, B, T, C, NH, NKV);
}

// The unfused path: the passes over q and k, dq and dk around the same kernels without RoPE.
static void unfused_fwd(void* self, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                        cudaStream_t) {
    RopeSelf* r = (RopeSelf*)self;
    rope_forward(qkv, r->table, B, T, NH, NKV, C / NH, r->ctx);
    impl_fwd(r, out, lse, qkv, NULL, B, T, C, NH, NKV);
}
static void unfused_bwd(void* self, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                        const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t) {
    RopeSelf* r = (RopeSelf*)self;
    impl_bwd(r, dqkv, D, dout, out, qkv, NULL, lse, B, T, C, NH, NKV);
    rope_backward(dqkv, r->table, B, T, NH, NKV, C / NH, r->ctx);
}

// qkv as a forward leaves it: uploaded, one forward, downloaded.
static bf16* qkv_after_forward(AttFwdFn fwd, void* self, const bf16* h_qkv, int B, int T, int NH, int NKV, int hs,
                               cudaStream_t st) {
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hs, nout = (size_t)B * T * NH * hs;
    bf16 *d_qkv, *d_out;
    float* d_lse;
    cuda_check(cudaMalloc(&d_qkv, nqkv * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_out, nout * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_lse, (size_t)B * NH * T * sizeof(float)));
    cuda_check(cudaMemcpy(d_qkv, h_qkv, nqkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda_check(cudaDeviceSynchronize());  // the upload ran on the legacy stream, which st does not wait for
    fwd(self, d_out, d_lse, d_qkv, B, T, NH * hs, NH, NKV, st);
    cuda_check(cudaStreamSynchronize(st));
    bf16* h = (bf16*)malloc_check(nqkv * sizeof(bf16));
    cuda_check(cudaMemcpy(h, d_qkv, nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_lse));
    return h;
}

typedef struct { int B, T, NH, NKV, hs; double theta; int impl; } Case;

static float* make_table(int T, int hs, double theta, const GpuContext* ctx) {
    float* table;
    cuda_check(cudaMalloc(&table, (size_t)T * hs * sizeof(float)));
    rope_table_fill(table, T, hs, theta, ctx);
    cuda_check(cudaStreamSynchronize(ctx->stream));
    return table;
}

static void check_reference(Case c, uint64_t seed, const GpuContext* ctx) {
    RopeSelf self = {make_table(c.T, c.hs, c.theta, ctx), ctx, c.impl};
    AttCheck r = att_check_rope(fused_fwd, fused_bwd, &self, c.B, c.T, c.NH, c.NKV, c.hs, c.theta, seed, ctx->stream);
    int ok = att_check_ok(&r, 1);
    printf("%s rope θ=%.0e B=%d T=%4d NH=%d NKV=%d hs=%3d: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e %s\n",
           IMPL_NAMES[c.impl], c.theta, c.B, c.T, c.NH, c.NKV, c.hs, r.out.rel_l2, r.lse.max_abs, r.dq.rel_l2, r.dk.rel_l2, r.dv.rel_l2,
           ok ? "ok" : "FAILED");
    if (!ok) att_check_print(&r, 1);
    const AttErr* errs[] = {&r.out, &r.dq, &r.dk, &r.dv};
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (int k = 0; k < 4; k++)
        EXPECT(att_err_ok(*errs[k], k == 0 ? ATT_TOL_OUT : ATT_TOL_GRAD),
               "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: %s rel L2 %.2e (tol %.0e), %zu non-finite", IMPL_NAMES[c.impl], c.theta, c.B, c.T,
               c.NH, c.NKV, c.hs, names[k], errs[k]->rel_l2, k == 0 ? ATT_TOL_OUT : ATT_TOL_GRAD, errs[k]->nonfinite);
    EXPECT(att_err_ok(r.lse, att_tol_lse(&r)), "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: lse max abs %.2e (tol %.0e)",
           IMPL_NAMES[c.impl], c.theta, c.B, c.T, c.NH, c.NKV, c.hs, r.lse.max_abs, att_tol_lse(&r));
    EXPECT(r.bitwise_repeatable, "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: two backward runs differ", IMPL_NAMES[c.impl], c.theta, c.B, c.T,
           c.NH, c.NKV, c.hs);
    cuda_check(cudaFree((void*)self.table));
}

static double rel_l2_part(const bf16* x, const bf16* ref, size_t rows, size_t W, size_t lo, size_t hi) {
    double num = 0, den = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = lo; i < hi; i++) {
            double a = __bfloat162float(x[r * W + i]), b = __bfloat162float(ref[r * W + i]);
            num += (a - b) * (a - b);
            den += b * b;
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void check_unfused(Case c, uint64_t seed, const GpuContext* ctx) {
    int B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, hs = c.hs;
    size_t rows = (size_t)B * T, W = (size_t)(NH + 2 * NKV) * hs, nout = rows * NH * hs, nrow = (size_t)B * NH * T;
    bf16* qkv = (bf16*)malloc_check(rows * W * sizeof(bf16));
    bf16* dout = (bf16*)malloc_check(nout * sizeof(bf16));
    att_inputs(qkv, dout, B, T, NH, NKV, hs, seed);
    float* table = make_table(T, hs, c.theta, ctx);
    RopeSelf self = {table, ctx, c.impl};
    AttRun f = att_run(fused_fwd, fused_bwd, &self, qkv, dout, B, T, NH, NKV, hs, ctx->stream);
    AttRun u = att_run(unfused_fwd, unfused_bwd, &self, qkv, dout, B, T, NH, NKV, hs, ctx->stream);
    bf16* fq = qkv_after_forward(fused_fwd, &self, qkv, B, T, NH, NKV, hs, ctx->stream);
    bf16* uq = qkv_after_forward(unfused_fwd, &self, qkv, B, T, NH, NKV, hs, ctx->stream);
    int qkv_same = memcmp(fq, uq, rows * W * sizeof(bf16)) == 0;
    int out_same = memcmp(f.out, u.out, nout * sizeof(bf16)) == 0;
    int lse_same = memcmp(f.lse, u.lse, nrow * sizeof(float)) == 0;
    size_t kq = (size_t)NH * hs, kv = (size_t)NKV * hs;
    int dv_same = 1;
    for (size_t r = 0; r < rows; r++)
        dv_same &= memcmp(f.dqkv + r * W + kq + kv, u.dqkv + r * W + kq + kv, kv * sizeof(bf16)) == 0;
    double dq = rel_l2_part(f.dqkv, u.dqkv, rows, W, 0, kq), dk = rel_l2_part(f.dqkv, u.dqkv, rows, W, kq, kq + kv);
    printf("%s fused vs unfused θ=%.0e B=%d T=%4d NH=%d NKV=%d hs=%3d: qkv %s, out %s, lse %s, dv %s; dq %.1e, "
           "dk %.1e\n", IMPL_NAMES[c.impl], c.theta, B, T, NH, NKV, hs, qkv_same ? "bitwise" : "DIFFERENT", out_same ? "bitwise" : "DIFFERENT",
           lse_same ? "bitwise" : "DIFFERENT", dv_same ? "bitwise" : "DIFFERENT", dq, dk);
    EXPECT(qkv_same, "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: qkv after the forward differs from the unfused passes'",
           IMPL_NAMES[c.impl], c.theta, B, T, NH, NKV, hs);
    EXPECT(out_same, "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: out differs from the unfused path", IMPL_NAMES[c.impl], c.theta, B, T, NH, NKV, hs);
    EXPECT(lse_same, "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: lse differs from the unfused path", IMPL_NAMES[c.impl], c.theta, B, T, NH, NKV, hs);
    EXPECT(dv_same, "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: dv differs from the unfused path", IMPL_NAMES[c.impl], c.theta, B, T, NH, NKV, hs);
    EXPECT(isfinite(dq) && dq <= ATT_TOL_GRAD && isfinite(dk) && dk <= ATT_TOL_GRAD,
           "%s θ=%.0e B=%d T=%d NH=%d NKV=%d hs=%d: dq, dk rel L2 %.2e, %.2e from the unfused path (tol %.0e)", IMPL_NAMES[c.impl], c.theta, B,
           T, NH, NKV, hs, dq, dk, ATT_TOL_GRAD);
    att_run_free(&f);
    att_run_free(&u);
    free(fq);
    free(uq);
    cuda_check(cudaFree(table));
    free(qkv);
    free(dout);
}

int main(void) {
    test_require_cuda("test_attention_rope");
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    const int heads[][2] = {{4, 1}, {4, 2}, {4, 4}, {8, 2}};
    for (int impl : {IMPL_MMA, IMPL_SM90}) {
        if (impl == IMPL_SM90 && !flash_sm90_available()) {
            printf("sm90: not run (needs an sm_90 GPU and an sm_90a build)\n");
            continue;
        }
        uint64_t seed = 3000;
        for (double theta : {1e4, 5e5})
            for (int hs = 64; hs <= 128; hs *= 2)
                for (const auto& nh : heads)
                    for (int T : {1, 63, 64, 65, 200})
                        for (int B = 1; B <= 2; B++) {
                            Case c = {B, T, nh[0], nh[1], hs, theta, impl};
                            check_reference(c, seed += 2, &ctx);
                            check_unfused(c, seed += 2, &ctx);
                        }
        for (int hs = 64; hs <= 128; hs *= 2) {
            Case c = {1, 1000, 4, 2, hs, 1e4, impl};
            check_reference(c, seed += 2, &ctx);
            check_unfused(c, seed += 2, &ctx);
        }
    }
    uint64_t seed = 5000;
    for (int hs : {32, 96})  // the simple kernels, with the passes, through the layer
        for (int NKV : {1, 4})
            for (int T : {1, 65, 200}) {
                Case c = {2, T, 4, NKV, hs, 1e4, IMPL_LAYER};
                check_reference(c, seed += 2, &ctx);
            }
    gpu_context_free(&ctx);
    return test_summary("test_attention_rope");
}
