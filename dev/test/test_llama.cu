// test_llama.cu: the CUDA Llama-style model (llmc/model/llama.cuh) against the CPU reference
// (dev/ref/llama_ref.h, float build), on a small model with o200k_base's vocabulary: L=2, C=256, NH=4,
// NKV=2 (hs 64: the flash kernels; two kv heads, each shared by two query heads), F=680 (a multiple of 8,
// not of 64), V=200019 padded to 200064, B=4, T=80 (not a multiple of the attention tile).
//   ./build/test_llama     (needs a GPU; a few minutes, mostly the CPU reference)
// Checks, each printed with its numbers:
//   1. the model's init equals the reference's init for the same seed, bitwise (same RNG and recipe)
//   2. loss and every parameter gradient vs the reference (targets include ignored positions); the
//      gradient of the padded rows of embed and lm_head is exactly 0
//   3. the eval loss equals the training loss; accumulating a batch twice at dloss 1/2 equals once at 1
//   4. the losses and gradient norms of 10 AdamW steps (with clipping and weight decay) vs the reference
//   5. two runs with the same seed are bitwise identical (losses and final master weights)
//   6. resume: 2N steps in one run equal N steps, a checkpoint file, a fresh model loaded from it and N
//      more steps, bitwise (losses, master weights, AdamW m and v)
// Data parallelism is dev/test/test_llama_dist.cu. Both sides evaluate the same model: the reference's
// parameters are rounded to bf16 first, since the GPU computes with bf16 parameters. Tolerances are
// stated where they are checked.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../llmc/model/llama.cuh"
#include "../../llmc/io/llama_checkpoint.cuh"
#include "../../llmc/io/checkpoint_dir.h"
#include "../ref/llama_ref.h"
#include "gpu_testing.cuh"
#include "model_testing.cuh"
#include "testing.h"

#define B_ 4
#define T_ 80
#define V_ 200019

static LlamaConfig small_config(void) {
    LlamaConfig c;
    c.vocab_size = V_; c.padded_vocab_size = llama_padded_vocab(V_); c.max_seq_len = T_;
    c.num_layers = 2; c.channels = 256; c.num_heads = 4; c.num_kv_heads = 2; c.ffn_hidden = 680;
    c.rope_theta = 10000.0; c.norm_eps = 1e-5;
    return c;
}

// One optimizer step's gradients of the batch, accumulated `times` times at dloss 1/times.
static void grads_of(LlamaModel* m, const int* in, const int* tg, int times, const GpuContext* ctx) {
    llama_zero_grad(m, ctx);
    for (int k = 0; k < times; k++) {
        llama_forward(m, in, B_, T_, ctx);
        llama_backward(m, tg, 1.0f / times, ctx);
    }
    cuda_check(cudaStreamSynchronize(ctx->stream));
}

// Every parameter tensor of the model (host copies, num_params floats) within tol (compare_tensor).
static void compare_tensors(const char* what, const float* got, const float* ref, const LlamaModel* m, double tol) {
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++)
        compare_tensor(what, llama_tensor_name(i), got + m->tensor_offset[i], ref + m->tensor_offset[i],
                       m->tensor_size[i], tol);
}

// The reference's gradient clipping (as gpt_ref_clip_grad_norm): returns the norm before clipping.
static double ref_clip(llama_ref_model* r, double max_norm) {
    double norm = llama_ref_grad_norm(r);
    if (norm > max_norm)
        for (size_t i = 0; i < r->num_params; i++) r->grads_memory[i] = (float)(r->grads_memory[i] * (max_norm / norm));
    return norm;
}

static void random_batch(uint64_t* rng, int* in, int* tg, int ignore_every) {
    for (int i = 0; i < B_ * T_; i++) {
        in[i] = (int)(rand_next(rng) % V_);
        tg[i] = ignore_every && i % ignore_every == 4 ? -1 : (int)(rand_next(rng) % V_);
    }
}

// Optimizer steps from+1 .. to on random batches drawn from *rng; losses[s] is the loss of step s+1.
static void train_steps(LlamaModel* m, uint64_t* rng, int from, int to, float* losses, const GpuContext* ctx) {
    int in[B_ * T_], tg[B_ * T_];
    for (int s = from; s < to; s++) {
        random_batch(rng, in, tg, 0);
        grads_of(m, in, tg, 1, ctx);
        llama_update(m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s + 1, 0, ctx);
        losses[s] = model_loss(m->acts.loss, ctx);
    }
}

// A model initialized from seed, trained `steps` steps on batches of the stream seed·31 + 7.
static void train_fresh(LlamaModel* m, const LlamaConfig* c, uint64_t seed, int steps, uint64_t* rng, float* losses,
                        const GpuContext* ctx) {
    llama_build(m, c, B_, T_, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    llama_init_params(m, seed, ctx);
    *rng = seed * 31 + 7;
    train_steps(m, rng, 0, steps, losses, ctx);
}

// 5. Two runs from the same seed, 3 steps on fresh batches: bitwise the same losses and master weights.
static void test_determinism(const LlamaConfig* c, float* a, float* b, const GpuContext* ctx) {
    float l1[3], l2[3];
    LlamaModel m;
    uint64_t rng;
    train_fresh(&m, c, 7, 3, &rng, l1, ctx);
    OptimState o = llama_optim(&m);
    copy_to_host(a, optim_gather(&o, OPTIM_MASTER, ctx->stream), m.num_params);
    llama_free(&m);
    train_fresh(&m, c, 7, 3, &rng, l2, ctx);
    o = llama_optim(&m);
    copy_to_host(b, optim_gather(&o, OPTIM_MASTER, ctx->stream), m.num_params);
    int same_master = bitwise_equal(a, b, m.num_params);
    llama_free(&m);
    printf("determinism: losses %.6f %.6f %.6f vs %.6f %.6f %.6f, master weights bitwise equal: %s\n", l1[0], l1[1],
           l1[2], l2[0], l2[1], l2[2], same_master ? "yes" : "no");
    EXPECT(memcmp(l1, l2, sizeof(l1)) == 0 && same_master, "two runs with the same seed differ");
}

// 6. Resume: N steps, a checkpoint written to a file, a fresh model (initialized from another seed, so
// that anything the load misses shows) loaded from it, N more steps; against 2N steps in one run. The
// batch generator's state travels in the checkpoint's RNG field, as the trainer's sampler state does.
static void test_resume(const LlamaConfig* c, float* a, float* b, const GpuContext* ctx) {
    enum { N = 3 };
    const uint64_t seed = 21;
    LlamaModel full, part, fresh;
    float loss_full[2 * N], loss_part[2 * N];
    uint64_t rng;
    train_fresh(&full, c, seed, 2 * N, &rng, loss_full, ctx);
    train_fresh(&part, c, seed, N, &rng, loss_part, ctx);
    char dir[] = "/tmp/test_llama_resume.XXXXXX", path[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN];
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(EXIT_FAILURE); }
    checkpoint_path(path, sizeof(path), dir, N);
    CheckpointState st;
    memset(&st, 0, sizeof(st));
    st.step = N;
    st.rng = rng;
    snprintf(st.settings, sizeof(st.settings), "-steps %d", 2 * N);
    int rc = llama_save_checkpoint(&part, path, &st, err, sizeof(err), ctx);
    EXPECT(rc == 0, "saving %s: %s", path, err);
    llama_free(&part);

    llama_build(&fresh, c, B_, T_, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    llama_init_params(&fresh, seed + 1, ctx);
    CheckpointReader r;
    rc = checkpoint_reader_open(&r, path);
    if (rc == 0) rc = checkpoint_reader_verify(&r);
    if (rc == 0) rc = llama_load_checkpoint(&fresh, &r, ctx);
    checkpoint_reader_close(&r);
    EXPECT(rc == 0, "loading %s: %s", path, r.err);
    EXPECT(r.state.step == N && r.state.rng == rng && r.state.model.family == CHECKPOINT_FAMILY_LLAMA,
           "checkpoint step %lld rng %llx family %d, expected %d %llx %d", (long long)r.state.step,
           (unsigned long long)r.state.rng, r.state.model.family, N, (unsigned long long)rng, CHECKPOINT_FAMILY_LLAMA);
    rng = r.state.rng;
    train_steps(&fresh, &rng, (int)r.state.step, 2 * N, loss_part, ctx);

    size_t n = full.num_params;
    OptimState oa = llama_optim(&full), ob = llama_optim(&fresh);  // the master weights through each one's gradients
    const float* fa[3] = {optim_gather(&oa, OPTIM_MASTER, ctx->stream), full.m_memory, full.v_memory};
    const float* fb[3] = {optim_gather(&ob, OPTIM_MASTER, ctx->stream), fresh.m_memory, fresh.v_memory};
    expect_resumed(N, loss_full, loss_part, fa, fb, n, a, b);
    llama_free(&fresh);
    llama_free(&full);
    remove(path);
    rmdir(dir);
}

int main(void) {
    test_require_cuda("test_llama");
    setvbuf(stdout, NULL, _IOLBF, 0);
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    LlamaConfig c = small_config();
    llama_ref_config rc;
    rc.max_seq_len = c.max_seq_len; rc.vocab_size = c.vocab_size; rc.padded_vocab_size = c.padded_vocab_size;
    rc.num_layers = c.num_layers; rc.num_heads = c.num_heads; rc.num_kv_heads = c.num_kv_heads;
    rc.channels = c.channels; rc.ffn_hidden = c.ffn_hidden; rc.rope_theta = c.rope_theta; rc.rms_norm_eps = c.norm_eps;
    const uint64_t seed = 1234;

    llama_ref_model ref;
    llama_ref_build(&ref, &rc, B_, T_);
    llama_ref_init_params(&ref, seed);
    LlamaModel m;
    llama_build(&m, &c, B_, T_, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH);
    EXPECT(m.num_params == ref.num_params, "parameter count %zu vs reference %zu", m.num_params, ref.num_params);
    size_t n = m.num_params;
    float* host = (float*)malloc_check(n * sizeof(float));
    float* host2 = (float*)malloc_check(n * sizeof(float));
    float* grads = (float*)malloc_check(n * sizeof(float));

    // 1. init
    llama_init_params(&m, seed, &ctx);
    OptimState o = llama_optim(&m);
    copy_to_host(host, optim_gather(&o, OPTIM_MASTER, ctx.stream), n);
    int init_same = bitwise_equal(host, ref.params_memory, n);
    printf("init: %zu parameters, bitwise equal to the reference's init: %s\n", n, init_same ? "yes" : "no");
    EXPECT(init_same, "llama_init_params(seed %llu) differs from llama_ref_init_params", (unsigned long long)seed);

    // the same bf16-representable parameters on both sides
    for (size_t i = 0; i < n; i++) ref.params_memory[i] = bf16_round(ref.params_memory[i]);
    llama_set_params(&m, ref.params_memory, &ctx);

    // a batch with ignored targets (every 9th position) to exercise ignore_index
    int in[B_ * T_], tg[B_ * T_];
    uint64_t rng = 99;
    random_batch(&rng, in, tg, 9);

    // 2. loss and gradients. Tolerances as test_gpt.cu's: bf16 rounds every activation and the
    // residual-stream gradient to 2^-9 relative; a dozen roundings in series (RMSNorm, the GEMMs, RoPE,
    // attention, SwiGLU) give ~1% relative error per gradient tensor, so 5% relative L2 passes bf16 and
    // catches a wrong formula (errors of order 1). The loss is a mean over 284 rows of fp32 softmax math
    // from bf16 activations: 2e-3 relative.
    grads_of(&m, in, tg, 1, &ctx);
    float loss = model_loss(m.acts.loss, &ctx);
    double ref_loss = llama_ref_forward(&ref, in, tg, B_, T_);
    llama_ref_backward(&ref);
    printf("loss: gpu %.6f, reference %.6f (rel diff %.2e, tol 2e-3)\n", loss, ref_loss, fabs(loss - ref_loss) / ref_loss);
    EXPECT(fabs(loss - ref_loss) <= 2e-3 * ref_loss, "loss %.6f vs reference %.6f", loss, ref_loss);
    copy_to_host(grads, m.grads_memory, n);
    printf("gradients vs reference:\n");
    compare_tensors("grad", grads, ref.grads_memory, &m, 5e-2);
    double pad = 0.0;  // rows >= V of embed and lm_head: no input reads them, no logit of theirs counts
    size_t C = c.channels, V = c.vocab_size, rows = (size_t)(c.padded_vocab_size - c.vocab_size);
    for (size_t j = 0; j < rows * C; j++)
        pad = fmax(pad, fmax(fabs(grads[m.tensor_offset[LLAMA_EMBED] + V * C + j]),
                             fabs(grads[m.tensor_offset[LLAMA_LM_HEAD] + V * C + j])));
    printf("padded vocabulary rows: max |gradient| %g (must be 0)\n", pad);
    EXPECT(pad == 0.0, "the padded rows of embed or lm_head have gradient %g", pad);

    // 3a. eval loss of the same batch: the same head forward, bitwise the same loss
    llama_forward(&m, in, B_, T_, &ctx);
    llama_eval_loss(&m, tg, &ctx);
    float eval_loss;
    cuda_check(cudaStreamSynchronize(ctx.stream));  // a plain cudaMemcpy does not wait for the non-blocking stream
    cuda_check(cudaMemcpy(&eval_loss, m.head.loss, sizeof(float), cudaMemcpyDeviceToHost));
    printf("eval loss %.6f vs training loss %.6f: %s\n", eval_loss, loss, eval_loss == loss ? "equal" : "DIFFERENT");
    EXPECT(eval_loss == loss, "llama_eval_loss %.7f differs from the training loss %.7f", eval_loss, loss);

    // 3b. the same batch accumulated twice at dloss 1/2: every gradient is exactly halved twice and summed,
    // so the result equals one pass (power-of-two scaling commutes with rounding); tolerance 1e-6 for safety
    grads_of(&m, in, tg, 2, &ctx);
    copy_to_host(host, m.grads_memory, n);
    float acc_loss = model_loss(m.acts.loss, &ctx);
    printf("gradient accumulation (2 x dloss 1/2 vs 1 x dloss 1): loss %.6f vs %.6f\n", acc_loss, loss);
    EXPECT(fabs(acc_loss - loss) <= 1e-6f * loss, "accumulated loss %.7f vs %.7f", acc_loss, loss);
    compare_tensors("accum", host, grads, &m, 1e-6);

    // 4. ten AdamW steps on the same batch, both sides from the same parameters. The GPU updates fp32
    // master weights but computes with their bf16 rounding; the losses drift apart by the bf16 error of
    // the model (~1e-3 relative per step): tolerance 0.05 absolute (llm.c's bf16 tolerance, as
    // test_gpt.cu), the gradient norm within 5%, and the loss must fall by 0.5 (so that a broken update
    // cannot pass; the reference's falls from 12.23 to 6.73 over these 10 steps).
    llama_set_params(&m, ref.params_memory, &ctx);
    float first = 0.0f, last = 0.0f;
    for (int s = 1; s <= 10; s++) {
        grads_of(&m, in, tg, 1, &ctx);
        llama_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s, 0, &ctx);
        float gl = model_loss(m.acts.loss, &ctx), gnorm;
        cuda_check(cudaMemcpy(&gnorm, m.acts.norm, sizeof(float), cudaMemcpyDeviceToHost));
        double rl = llama_ref_forward(&ref, in, tg, B_, T_);
        llama_ref_backward(&ref);
        double rnorm = ref_clip(&ref, 1.0);
        llama_ref_adamw_step(&ref, 1e-3, 0.9, 0.95, 1e-8, 0.1, s);
        printf("step %2d: loss gpu %.6f ref %.6f (diff %.1e, tol 5e-2) | grad norm gpu %.4f ref %.4f\n", s, gl, rl,
               fabs(gl - rl), gnorm, rnorm);
        EXPECT(fabs(gl - rl) <= 5e-2, "step %d: loss %.6f vs reference %.6f", s, gl, rl);
        EXPECT(fabs(gnorm - rnorm) <= 5e-2 * rnorm, "step %d: grad norm %.5f vs reference %.5f", s, gnorm, rnorm);
        if (s == 1) first = gl;
        last = gl;
    }
    EXPECT(last < first - 0.5f, "the loss did not fall over 10 steps on one batch: %.4f -> %.4f", first, last);
    llama_free(&m);
    llama_ref_free(&ref);

    test_determinism(&c, host, host2, &ctx);
    test_resume(&c, host, host2, &ctx);

    free(grads);
    free(host2);
    free(host);
    gpu_context_free(&ctx);
    return test_summary("test_llama");
}
