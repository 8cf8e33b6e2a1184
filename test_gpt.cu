// test_gpt.cu: the CUDA model (llmc/model/gpt.cuh) against the CPU reference (dev/ref/gpt_ref.h, float
// build), on a small GPT with the real vocabulary: L=2, C=128, NH=2, V=50257 padded to 50304, B=4, T=80.
//   ./test_gpt          (needs a GPU; ~1 minute, mostly the CPU reference)
// Checks, each printed with its numbers:
//   1. the model's init equals the reference's init for the same seed, bitwise (same RNG and recipe)
//   2. loss and every parameter gradient vs the reference (targets include ignored positions)
//   3. the unfused head agrees with the fused one; recompute agrees with no recompute (its GELU is a
//      kernel, not the fc GEMM's epilogue); the eval loss equals the training loss; accumulating a
//      batch twice at dloss 1/2 equals once at 1
//   4. the losses of 10 AdamW steps (with clipping and weight decay) vs the reference
//   5. two runs with the same seed are bitwise identical (losses and final master weights), and a third
//      with -gemm_tune's tuned GEMMs (llmc/layers/matmul.cuh), the head's included, is bitwise the same too
//   6. resume: 2N steps in one run equal N steps, a checkpoint file, a fresh model loaded from it and N
//      more steps, bitwise (losses, master weights, AdamW m and v)
// Both sides evaluate the same model: the reference's parameters are rounded to bf16 first, since the
// GPU computes with bf16 parameters. Tolerances are stated where they are checked.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmc/model/gpt.cuh"
#include "llmc/io/gpt_checkpoint.cuh"
#include "llmc/io/checkpoint_dir.h"
#include "dev/ref/gpt_ref.h"
#include "dev/test/model_testing.cuh"
#include "dev/test/testing.h"

#define L_ 2
#define C_ 128
#define NH_ 2  // head size 64: the flash attention path, as in GPT-2
#define B_ 4
#define T_ 80  // not a multiple of the attention tile (64)

static GptConfig small_config(void) {
    GptConfig c;
    c.max_seq_len = T_; c.vocab_size = 50257; c.padded_vocab_size = 50304;
    c.num_layers = L_; c.num_heads = NH_; c.channels = C_;
    return c;
}

// One optimizer step's gradients of the batch, accumulated `times` times at dloss 1/times.
static void grads_of(GptModel* m, const int* in, const int* tg, int times, const GpuContext* ctx) {
    gpt_zero_grad(m, ctx);
    for (int k = 0; k < times; k++) {
        gpt_forward(m, in, B_, T_, ctx);
        gpt_backward(m, tg, 1.0f / times, ctx);
    }
    cuda_check(cudaStreamSynchronize(ctx->stream));
}

// The same parameters in a second model built with other choices (recompute, head): its gradients of
// the batch into out (num_params floats); returns its loss
static float grads_with(const GptConfig* c, int recompute, FusedLcePath head, const float* params, const int* in, const int* tg,
                        float* out, const GpuContext* ctx) {
    GptModel o;
    gpt_build(&o, c, B_, T_, recompute, head, FUSED_LCE_DEFAULT_SCRATCH);
    gpt_set_params(&o, params, ctx);
    grads_of(&o, in, tg, 1, ctx);
    copy_to_host(out, o.grads_memory, o.num_params);
    float l = model_loss(o.acts.loss, ctx);
    gpt_free(&o);
    return l;
}

// Every parameter tensor of the model (host copies, num_params floats) within tol (compare_tensor).
static void compare_tensors(const char* what, const float* got, const float* ref, const GptModel* m, double tol) {
    for (int i = 0; i < GPT_NUM_TENSORS; i++)
        compare_tensor(what, gpt_tensor_name(i), got + m->tensor_offset[i], ref + m->tensor_offset[i],
                       m->tensor_size[i], tol);
}

// Optimizer steps from+1 .. to on random batches drawn from *rng (the run's data stream); losses[s]
// is the loss of step s+1.
static void train_steps(GptModel* m, uint64_t* rng, int from, int to, float* losses, const GpuContext* ctx) {
    int in[B_ * T_], tg[B_ * T_];
    for (int s = from; s < to; s++) {
        for (int i = 0; i < B_ * T_; i++) {
            in[i] = (int)(rand_next(rng) % 50257);
            tg[i] = (int)(rand_next(rng) % 50257);
        }
        grads_of(m, in, tg, 1, ctx);
        gpt_update(m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s + 1, 0, ctx);
        losses[s] = model_loss(m->acts.loss, ctx);
    }
}

// Trains `steps` steps on batches derived from seed; returns losses and the final master weights.
static void train_run(float* losses, float* master, const GptConfig* c, uint64_t seed, int steps, const GpuContext* ctx) {
    GptModel m;
    gpt_build(&m, c, B_, T_, 0, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    gpt_init_params(&m, seed, ctx);
    uint64_t rng = seed * 31 + 7;
    train_steps(&m, &rng, 0, steps, losses, ctx);
    OptimState o = gpt_optim(&m);
    copy_to_host(master, optim_gather(&o, OPTIM_MASTER, ctx->stream), m.num_params);
    gpt_free(&m);
}

// 6. Resume: N steps, a checkpoint written to a file, a fresh model (initialized from another seed, so
// that anything the load misses shows) loaded from it, N more steps; against 2N steps in one run. The
// batch generator's state travels in the checkpoint's RNG field, as the trainer's sampler state does.
static void test_resume(const GptConfig* c, const GpuContext* ctx) {
    enum { N = 3 };
    const uint64_t seed = 21;
    GptModel full, part, fresh;
    float loss_full[2 * N], loss_part[2 * N];
    gpt_build(&full, c, B_, T_, 0, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    gpt_init_params(&full, seed, ctx);
    uint64_t rng = seed * 31 + 7;
    train_steps(&full, &rng, 0, 2 * N, loss_full, ctx);

    gpt_build(&part, c, B_, T_, 0, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    gpt_init_params(&part, seed, ctx);
    rng = seed * 31 + 7;
    train_steps(&part, &rng, 0, N, loss_part, ctx);
    char dir[] = "/tmp/test_gpt_resume.XXXXXX", path[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN];
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(EXIT_FAILURE); }
    checkpoint_path(path, sizeof(path), dir, N);
    CheckpointState st;
    memset(&st, 0, sizeof(st));
    st.step = N;
    st.rng = rng;
    snprintf(st.settings, sizeof(st.settings), "-steps %d", 2 * N);
    int rc = gpt_save_checkpoint(&part, path, &st, err, sizeof(err), ctx);
    EXPECT(rc == 0, "saving %s: %s", path, err);
    gpt_free(&part);

    gpt_build(&fresh, c, B_, T_, 0, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    gpt_init_params(&fresh, seed + 1, ctx);
    CheckpointReader r;
    rc = checkpoint_reader_open(&r, path);
    if (rc == 0) rc = gpt_load_checkpoint(&fresh, &r, ctx);
    checkpoint_reader_close(&r);
    EXPECT(rc == 0, "loading %s: %s", path, r.err);
    EXPECT(r.state.step == N && r.state.rng == rng, "checkpoint step %lld rng %llx, expected %d %llx",
           (long long)r.state.step, (unsigned long long)r.state.rng, N, (unsigned long long)rng);
    rng = r.state.rng;
    train_steps(&fresh, &rng, (int)r.state.step, 2 * N, loss_part, ctx);

    size_t n = full.num_params;
    float* a = (float*)malloc_check(n * sizeof(float));
    float* b = (float*)malloc_check(n * sizeof(float));
    OptimState oa = gpt_optim(&full), ob = gpt_optim(&fresh);  // the master weights through each one's gradients
    const float* fa[3] = {optim_gather(&oa, OPTIM_MASTER, ctx->stream), full.m_memory, full.v_memory};
    const float* fb[3] = {optim_gather(&ob, OPTIM_MASTER, ctx->stream), fresh.m_memory, fresh.v_memory};
    expect_resumed(N, loss_full, loss_part, fa, fb, n, a, b);
    free(b);
    free(a);
    gpt_free(&fresh);
    gpt_free(&full);
    remove(path);
    rmdir(dir);
}

int main(void) {
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    GptConfig c = small_config();
    gpt_ref_config rc;
    rc.max_seq_len = c.max_seq_len; rc.vocab_size = c.vocab_size; rc.padded_vocab_size = c.padded_vocab_size;
    rc.num_layers = c.num_layers; rc.num_heads = c.num_heads; rc.channels = c.channels;
    const uint64_t seed = 1234;

    gpt_ref_model ref;
    gpt_ref_build(&ref, &rc, B_, T_);
    gpt_ref_init_params(&ref, seed);
    GptModel m;
    gpt_build(&m, &c, B_, T_, 0, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    EXPECT(m.num_params == ref.num_params, "parameter count %zu vs reference %zu", m.num_params, ref.num_params);
    size_t n = m.num_params;
    float* host = (float*)malloc_check(n * sizeof(float));
    float* host2 = (float*)malloc_check(n * sizeof(float));

    // 1. init
    gpt_init_params(&m, seed, &ctx);
    OptimState o = gpt_optim(&m);
    copy_to_host(host, optim_gather(&o, OPTIM_MASTER, ctx.stream), n);
    int init_same = bitwise_equal(host, ref.params_memory, n);
    printf("init: %zu parameters, bitwise equal to the reference's init: %s\n", n, init_same ? "yes" : "no");
    EXPECT(init_same, "gpt_init_params(seed %llu) differs from gpt_ref_init_params", (unsigned long long)seed);

    // the same bf16-representable parameters on both sides
    for (size_t i = 0; i < n; i++) ref.params_memory[i] = bf16_round(ref.params_memory[i]);
    gpt_set_params(&m, ref.params_memory, &ctx);

    // a batch with ignored targets (every 9th position) to exercise ignore_index
    int in[B_ * T_], tg[B_ * T_];
    uint64_t rng = 99;
    for (int i = 0; i < B_ * T_; i++) {
        in[i] = (int)(rand_next(&rng) % 50257);
        tg[i] = i % 9 == 4 ? -1 : (int)(rand_next(&rng) % 50257);
    }

    // 2. loss and gradients. Tolerances: bf16 rounds every activation and the residual-stream gradient
    // to 2^-9 relative; a dozen roundings in series give ~1% relative error per gradient tensor, so
    // 5% relative L2 passes bf16 and catches a wrong formula (errors of order 1). The loss is a mean
    // over 230 rows of fp32 softmax math from bf16 activations: 2e-3 relative.
    grads_of(&m, in, tg, 1, &ctx);
    float loss = model_loss(m.acts.loss, &ctx);
    double ref_loss = gpt_ref_forward(&ref, in, tg, B_, T_);
    gpt_ref_backward(&ref);
    printf("loss: gpu %.6f, reference %.6f (rel diff %.2e, tol 2e-3)\n", loss, ref_loss, fabs(loss - ref_loss) / ref_loss);
    EXPECT(fabs(loss - ref_loss) <= 2e-3 * ref_loss, "loss %.6f vs reference %.6f", loss, ref_loss);
    float* grads = (float*)malloc_check(n * sizeof(float));
    copy_to_host(grads, m.grads_memory, n);
    printf("gradients vs reference:\n");
    compare_tensors("grad", grads, ref.grads_memory, &m, 5e-2);

    // 3a. eval loss of the same batch: the same head forward, bitwise the same loss
    gpt_forward(&m, in, B_, T_, &ctx);
    gpt_eval_loss(&m, tg, &ctx);
    float eval_loss;
    cuda_check(cudaStreamSynchronize(ctx.stream));  // a plain cudaMemcpy does not wait for the non-blocking stream
    cuda_check(cudaMemcpy(&eval_loss, m.head.loss, sizeof(float), cudaMemcpyDeviceToHost));
    printf("eval loss %.6f vs training loss %.6f: %s\n", eval_loss, loss, eval_loss == loss ? "equal" : "DIFFERENT");
    EXPECT(eval_loss == loss, "gpt_eval_loss %.7f differs from the training loss %.7f", eval_loss, loss);

    // 3b. the same batch accumulated twice at dloss 1/2: every gradient is exactly halved twice and summed,
    // so the result equals one pass (power-of-two scaling commutes with rounding); tolerance 1e-6 for safety
    grads_of(&m, in, tg, 2, &ctx);
    copy_to_host(host, m.grads_memory, n);
    float acc_loss = model_loss(m.acts.loss, &ctx);
    printf("gradient accumulation (2 x dloss 1/2 vs 1 x dloss 1): loss %.6f vs %.6f\n", acc_loss, loss);
    EXPECT(fabs(acc_loss - loss) <= 1e-6f * loss, "accumulated loss %.7f vs %.7f", acc_loss, loss);
    compare_tensors("accum", host, grads, &m, 1e-6);

    // 3c. recompute: the forward's GELU is then llmc/layers/gelu.cuh's kernel on the stored bf16 u (what the
    // backward reruns), where without recompute it is the fc GEMM's epilogue on the fp32 u: the GELU
    // outputs differ by one bf16 rounding in some elements (~2e-3 relative L2), so the loss agrees to
    // 1e-3 relative and each gradient tensor to 1e-2 relative L2 (a GELU rerun on the wrong input or
    // layer is O(1) off), and against the reference within the same tolerance as the run above
    {
        float rl = grads_with(&c, 1, FUSED_LCE_PATH_BLOCKS, ref.params_memory, in, tg, host, &ctx);
        printf("recompute: loss %.6f vs %.6f without (rel diff %.2e, tol 1e-3)\n", rl, loss, fabs(rl - loss) / loss);
        EXPECT(fabs(rl - loss) <= 1e-3 * loss, "recompute loss %.6f vs %.6f without", rl, loss);
        compare_tensors("recompute", host, grads, &m, 1e-2);
        compare_tensors("recomp/ref", host, ref.grads_memory, &m, 5e-2);
    }

    // 3d. unfused head (bf16 logits, rounded before the softmax) vs fused (fp32 logits): logits near 0
    // at init round to ~1e-3 absolute, so the loss agrees to 1e-3 relative and gradients to 3e-2 rel L2
    {
        float ul = grads_with(&c, 0, FUSED_LCE_PATH_UNFUSED, ref.params_memory, in, tg, host, &ctx);
        printf("unfused head: loss %.6f vs fused %.6f (rel diff %.2e, tol 1e-3)\n", ul, loss, fabs(ul - loss) / loss);
        EXPECT(fabs(ul - loss) <= 1e-3 * loss, "unfused loss %.6f vs fused %.6f", ul, loss);
        compare_tensors("unfused", host, grads, &m, 3e-2);
    }

    // 3e. the fused head in row chunks instead of blocks: the same fp32 logits from GEMMs of other shapes
    // (another summation order), so the loss agrees to ~1e-6; where a logit's last bits differ, its bf16
    // gradient (and dx) may round the other way, by up to 2^-8 of itself. Each head's dx is within
    // 2·2^-8 = 7.8e-3 of the exact one (test_fused_lce's bound); that bound, carried linearly back through
    // the layers, is the tolerance here (measured: 1.6e-3 to 3.5e-3). A wrong head is off by O(1).
    {
        float kl = grads_with(&c, 0, FUSED_LCE_PATH_CHUNKS, ref.params_memory, in, tg, host, &ctx);
        printf("chunked head: loss %.6f vs blocks %.6f (rel diff %.2e, tol 1e-5)\n", kl, loss, fabs(kl - loss) / loss);
        EXPECT(fabs(kl - loss) <= 1e-5 * loss, "chunked-head loss %.7f vs blocks %.7f", kl, loss);
        compare_tensors("chunked head", host, grads, &m, 7.8e-3);
    }

    // 4. ten AdamW steps on the same batch, both sides from the same parameters. The GPU updates fp32
    // master weights but computes with their bf16 rounding; the losses drift apart by the bf16 error
    // of the model (~1e-3 relative per step): tolerance 0.05 absolute (llm.c's bf16 tolerance), and
    // the loss must fall (so that a broken update cannot pass).
    gpt_set_params(&m, ref.params_memory, &ctx);
    float first = 0.0f, last = 0.0f;
    for (int s = 1; s <= 10; s++) {
        grads_of(&m, in, tg, 1, &ctx);
        gpt_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s, 0, &ctx);
        float gl = model_loss(m.acts.loss, &ctx);
        float gnorm;
        cuda_check(cudaMemcpy(&gnorm, m.acts.norm, sizeof(float), cudaMemcpyDeviceToHost));
        double rl = gpt_ref_forward(&ref, in, tg, B_, T_);
        gpt_ref_backward(&ref);
        double rnorm = gpt_ref_clip_grad_norm(&ref, 1.0);
        gpt_ref_adamw_step(&ref, 1e-3, 0.9, 0.95, 1e-8, 0.1, s);
        printf("step %2d: loss gpu %.6f ref %.6f (diff %.1e, tol 5e-2) | grad norm gpu %.4f ref %.4f\n", s, gl, rl,
               fabs(gl - rl), gnorm, rnorm);
        EXPECT(fabs(gl - rl) <= 5e-2, "step %d: loss %.6f vs reference %.6f", s, gl, rl);
        EXPECT(fabs(gnorm - rnorm) <= 5e-2 * rnorm, "step %d: grad norm %.5f vs reference %.5f", s, gnorm, rnorm);
        if (s == 1) first = gl;
        last = gl;
    }
    EXPECT(last < first - 0.5f, "the loss did not fall over 10 steps on one batch: %.4f -> %.4f", first, last);

    // 5. determinism: two runs from the same seed, 3 steps on fresh batches
    float l1[3], l2[3];
    train_run(l1, host, &c, 7, 3, &ctx);
    train_run(l2, host2, &c, 7, 3, &ctx);
    int same = memcmp(l1, l2, sizeof(l1)) == 0 && bitwise_equal(host, host2, n);
    printf("determinism: losses %.6f %.6f %.6f vs %.6f %.6f %.6f, master weights bitwise equal: %s\n",
           l1[0], l1[1], l1[2], l2[0], l2[1], l2[2], bitwise_equal(host, host2, n) ? "yes" : "no");
    EXPECT(same, "two runs with the same seed differ");

    // 5, tuned: the same run with -gemm_tune's GEMMs
    GpuContext tuned = ctx;
    tuned.gemm_tune = 1;
    train_run(l2, host2, &c, 7, 3, &tuned);
    same = memcmp(l1, l2, sizeof(l1)) == 0 && bitwise_equal(host, host2, n);
    printf("gemm_tune: losses %.6f %.6f %.6f vs %.6f %.6f %.6f untuned, master weights bitwise equal: %s (%d tuned plans)\n",
           l2[0], l2[1], l2[2], l1[0], l1[1], l1[2], bitwise_equal(host, host2, n) ? "yes" : "no", tuned.gemm_tuned->n);
    EXPECT(same, "tuned GEMMs change the run");
    EXPECT(tuned.gemm_tuned->n > 0, "gemm_tune: no GEMM was tuned");

    test_resume(&c, &ctx);

    free(grads);
    free(host2);
    free(host);
    gpt_free(&m);
    gpt_ref_free(&ref);
    gpu_context_free(&ctx);
    return test_summary("test_gpt");
}
