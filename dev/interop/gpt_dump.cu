// gpt_dump.cu: train_gpt's side of the check against Hugging Face transformers (dev/interop/hf_check.py).
// It builds the model of a checkpoint as train_gpt does (bf16 parameters = round(master weights), the
// fused head), runs one forward and one backward on given tokens, and writes what it computed:
//   build/dev/gpt_dump CKPT TOKENS OUT_DIR
//   CKPT     a ckpt_<step>.bin file or a run's -out directory (its latest checkpoint), as -resume takes
//   TOKENS   a safetensors file with "tokens", I32 or I64 (B, T+1): inputs [:, :T], targets [:, 1:]
//   OUT_DIR  gets outputs.safetensors: "logits" F32 (B, T, V), the fp32 logits of every position as the
//              sampler computes them (bf16 lnf output · bf16 wteᵀ, fp32 accumulation), and "loss" F32
//              (1,), the mean cross-entropy over all B·T targets from the fused head (what training
//              reports); and grads.safetensors: the gradient of that loss for every parameter, fp32, under
//              Hugging Face's names and layouts (llmc/gpt_hf.h), so that it compares name by name with
//              torch's .grad of the exported model.
// Needs a GPU. Build: make build/dev/gpt_dump.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/gpt.cuh"
#include "../../llmc/gpt_checkpoint.cuh"
#include "../../llmc/checkpoint_dir.h"
#include "../../llmc/gpt_hf.h"

static void die(const char* what, const char* msg) {
    fprintf(stderr, "error: %s: %s\n", what, msg);
    exit(EXIT_FAILURE);
}

// tokens (B, T+1) from the file; *B and *T set.
static int* read_tokens(const char* path, int vocab, int max_t, int* B, int* T) {
    SafetensorsReader r;
    if (safetensors_open(&r, path) != 0) die("TOKENS", r.err);
    const SafetensorsTensor* t = safetensors_find(&r, "tokens");
    if (!t || t->ndim != 2 || t->shape[1] < 2 || t->shape[1] - 1 > max_t || t->shape[0] < 1 ||
        (t->dtype != ST_I32 && t->dtype != ST_I64))
        die(path, "needs a tensor \"tokens\", I32 or I64, of shape (B, T+1) with 1 <= T <= the model's context");
    *B = (int)t->shape[0];
    *T = (int)t->shape[1] - 1;
    size_t n = (size_t)safetensors_numel(t);
    void* raw = malloc_check(n * safetensors_dtype_size(t->dtype));
    if (safetensors_read(&r, t, raw) != 0) die("TOKENS", r.err);
    int* tok = (int*)malloc_check(n * sizeof(int));
    for (size_t i = 0; i < n; i++) {
        int64_t v = t->dtype == ST_I32 ? ((const int32_t*)raw)[i] : ((const int64_t*)raw)[i];
        if (v < 0 || v >= vocab) die(path, "a token id outside [0, 50257)");
        tok[i] = (int)v;
    }
    free(raw);
    safetensors_close(&r);
    return tok;
}

int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: build/dev/gpt_dump CKPT TOKENS.safetensors OUT_DIR (see dev/interop/gpt_dump.cu)\n");
        return EXIT_FAILURE;
    }
    char ckpt_path[CHECKPOINT_PATH_LEN], err[GPT_HF_ERR_LEN];
    if (checkpoint_resolve(ckpt_path, sizeof(ckpt_path), argv[1], "out", err, sizeof(err)) != 0) die("CKPT", err);
    CheckpointReader ck;
    checkpoint_check(ck.err, checkpoint_reader_open(&ck, ckpt_path));
    const CheckpointModel* cm = &ck.state.model;
    if (cm->family != CHECKPOINT_FAMILY_GPT2) die(ckpt_path, "holds a Llama-style model; this tool dumps GPT-2 models");
    GptConfig c;
    c.num_layers = cm->num_layers; c.channels = cm->channels; c.num_heads = cm->num_heads;
    c.vocab_size = cm->vocab_size; c.padded_vocab_size = cm->padded_vocab_size; c.max_seq_len = cm->max_seq_len;
    int B, T, V = c.vocab_size;
    int* tok = read_tokens(argv[2], V, c.max_seq_len, &B, &T);
    int* inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    int* targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = tok[b * (T + 1) + t];
            targets[b * T + t] = tok[b * (T + 1) + t + 1];
        }

    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    GptModel m;
    gpt_build(&m, &c, B, T, 0, FLCE_PATH_AUTO, FLCE_DEFAULT_SCRATCH);
    checkpoint_check(ck.err, gpt_load_checkpoint(&m, &ck, &ctx));
    checkpoint_reader_close(&ck);

    gpt_forward(&m, inputs, B, T, &ctx);
    float* logits = (float*)malloc_check((size_t)B * T * V * sizeof(float));
    for (int row = 0; row < B * T; row++) {
        gpt_logits_row(&m, row, &ctx);
        cuda_check(cudaMemcpyAsync(logits + (size_t)row * V, m.acts.logits_row, (size_t)V * sizeof(float),
                                   cudaMemcpyDeviceToHost, ctx.stream));
    }
    gpt_zero_grad(&m, &ctx);
    gpt_backward(&m, targets, 1.0f, &ctx);
    float loss;
    cuda_check(cudaMemcpyAsync(&loss, m.acts.loss, sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
    cuda_check(cudaStreamSynchronize(ctx.stream));
    fused_lce_check(&m.head, &ctx);
    float* grads = (float*)malloc_check(m.num_params * sizeof(float));
    cuda_check(cudaMemcpy(grads, m.grads_memory, m.num_params * sizeof(float), cudaMemcpyDeviceToHost));

    char path[CHECKPOINT_PATH_LEN + 32];
    if (gpt_hf_make_dir(argv[3], err, sizeof(err)) != 0) die("OUT_DIR", err);
    SafetensorsTensor out[2];
    int64_t ls[3] = {B, T, V}, one[1] = {1};
    safetensors_tensor(&out[0], "logits", ST_F32, 3, ls);
    safetensors_tensor(&out[1], "loss", ST_F32, 1, one);
    snprintf(path, sizeof(path), "%s/outputs.safetensors", argv[3]);
    SafetensorsWriter w;
    const char* const meta[] = {"format", "pt", NULL};
    int rc = safetensors_writer_open(&w, path, out, 2, meta);
    if (rc == 0) rc = safetensors_writer_append(&w, logits, (size_t)B * T * V * sizeof(float));
    if (rc == 0) rc = safetensors_writer_append(&w, &loss, sizeof(float));
    if (rc == 0) rc = safetensors_writer_close(&w);
    if (rc != 0) die("OUT_DIR", w.err);
    snprintf(path, sizeof(path), "%s/grads.safetensors", argv[3]);
    if (gpt_hf_write_safetensors(path, &c, grads, err, sizeof(err)) != 0) die("OUT_DIR", err);
    printf("gpt_dump: %s, B %d, T %d: loss %.6f; wrote %s/outputs.safetensors (logits, loss) and "
           "%s/grads.safetensors\n", ckpt_path, B, T, loss, argv[3], argv[3]);

    free(grads);
    free(logits);
    gpt_free(&m);
    gpu_context_free(&ctx);
    free(targets);
    free(inputs);
    free(tok);
    return 0;
}
