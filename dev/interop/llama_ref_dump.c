// llama_ref_dump.c: the CPU reference model (dev/ref/model_ref.h, in double) of the Llama-style family,
// a small random model, exported to Hugging Face's layout with llmc/io/hf_model.h, and its logits and loss
// on random tokens: what dev/interop/llama_check.py compares with transformers' LlamaForCausalLM, an
// implementation this project did not write (doc/interop.md).
//   build/dev/llama_ref_dump DIR
// writes DIR/hf/ (config.json, model.safetensors), DIR/tokens.bin (int32, B·(T+1): inputs are the first
// T of each row, targets the last T), DIR/logits.bin (float64, B·T·V: the real vocabulary only) and
// DIR/loss.txt (the mean cross-entropy, %.17g).
//   build/dev/llama_ref_dump DIR --init HF_DIR
// the import's side: the model of HF_DIR (a LlamaForCausalLM of the sizes below, e.g. transformers'
// save_pretrained) read by llmc/io/hf_model_import.h, its loss on DIR/tokens.bin to DIR/loss_init.txt.
// The model: V = 997 padded to 1024, L = 2, C = 128, NH = 4, NKV = 2 (grouped-query), hs = 32, F = 344,
// θ = 5e5, eps 1e-5; B = 2, T = 33. The weights are the reference's init scaled so that the layers do
// something measurable (matrices N(0, 0.2) before scaling by the init's depth factor, norm weights
// 1 + N(0, 0.1)), then rounded to fp32, the precision of the export, so both sides hold the same numbers.
#define REF_DOUBLE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/io/hf_model_import.h"
#include "../ref/model_ref.h"

#define B_ 2
#define T_ 33

static void write_file(const char* path, const void* data, size_t bytes) {
    FILE* f = fopen_check(path, "wb");
    fwrite_check(data, 1, bytes, f);
    fclose_check(f);
}

// The import's side (usage above): the loss of HF_DIR's weights on DIR/tokens.bin.
static int init_loss(ref_model* m, const ModelConfig* c, const char* dir, const char* hf) {
    char path[1024];
    float* values = (float*)malloc_check(m->num_params * sizeof(float));
    LlamaHfReader r;
    if (llama_hf_open(&r, hf) != 0 || llama_hf_load(&r, c, values) != 0) {
        fprintf(stderr, "error: --init %s: %s\n", hf, r.err);
        return 1;
    }
    for (size_t i = 0; i < m->num_params; i++) m->params_memory[i] = (double)values[i];
    int tokens[B_ * (T_ + 1)], in[B_ * T_], tg[B_ * T_];
    snprintf(path, sizeof(path), "%s/tokens.bin", dir);
    FILE* f = fopen_check(path, "rb");
    fread_check(tokens, sizeof(int), B_ * (T_ + 1), f);
    fclose_check(f);
    for (int b = 0; b < B_; b++)
        for (int t = 0; t < T_; t++) {
            in[b * T_ + t] = tokens[b * (T_ + 1) + t];
            tg[b * T_ + t] = tokens[b * (T_ + 1) + t + 1];
        }
    double loss = ref_model_forward(m, in, tg, B_, T_);
    snprintf(path, sizeof(path), "%s/loss_init.txt", dir);
    f = fopen_check(path, "w");
    fprintf(f, "%.17g\n", loss);
    fclose_check(f);
    printf("llama_ref_dump: --init %s, loss %.9f\n", hf, loss);
    free(values);
    return 0;
}

int main(int argc, char** argv) {
    int init = argc == 4 && strcmp(argv[2], "--init") == 0;
    if (argc != 2 && !init) {
        fprintf(stderr, "usage: %s DIR [--init HF_DIR]\n", argv[0]);
        return 2;
    }
    const char* dir = argv[1];
    if (strlen(dir) > 900) {
        fprintf(stderr, "error: %s: a directory path of at most 900 bytes, please\n", dir);
        return 2;
    }
    ModelConfig c = model_config_llama_sizes(997, 1024, 64, 2, 128, 4, 2, 344, 5e5, 1e-5);
    ref_model m;
    ref_model_build(&m, &c, B_, T_);
    if (init) {
        int rc = init_loss(&m, &c, dir, argv[3]);
        ref_model_free(&m);
        return rc;
    }
    ref_model_init_params(&m, 1234);
    uint64_t rng = 99;
    float* values = (float*)malloc_check(m.num_params * sizeof(float));
    for (int t = 0; t < m.spec->num_tensors; t++) {
        int norm = m.spec->tensors[t].init == MODEL_INIT_ONES;
        for (size_t j = m.tensor_offset[t]; j < m.tensor_offset[t] + m.tensor_size[t]; j++) {
            double p = m.params_memory[j];
            p = norm ? 1.0 + 0.1 * rand_normal(&rng) : 10.0 * p;
            values[j] = (float)p;
            m.params_memory[j] = (double)values[j];
        }
    }
    int tokens[B_ * (T_ + 1)], in[B_ * T_], tg[B_ * T_];
    for (int i = 0; i < B_ * (T_ + 1); i++) tokens[i] = (int)(rand_next(&rng) % (uint64_t)c.vocab_size);
    for (int b = 0; b < B_; b++)
        for (int t = 0; t < T_; t++) {
            in[b * T_ + t] = tokens[b * (T_ + 1) + t];
            tg[b * T_ + t] = tokens[b * (T_ + 1) + t + 1];
        }
    double loss = ref_model_forward(&m, in, tg, B_, T_);

    char err[HF_ERR_LEN], path[1024];
    snprintf(path, sizeof(path), "%s/hf", dir);
    if (hf_model_export(path, &c, values, NULL, -1, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/tokens.bin", dir);
    write_file(path, tokens, sizeof(tokens));
    double* logits = (double*)malloc_check((size_t)B_ * T_ * c.vocab_size * sizeof(double));
    for (int r = 0; r < B_ * T_; r++)
        memcpy(logits + (size_t)r * c.vocab_size, m.acts.logits + (size_t)r * c.padded_vocab_size,
               (size_t)c.vocab_size * sizeof(double));
    snprintf(path, sizeof(path), "%s/logits.bin", dir);
    write_file(path, logits, (size_t)B_ * T_ * c.vocab_size * sizeof(double));
    snprintf(path, sizeof(path), "%s/loss.txt", dir);
    FILE* f = fopen_check(path, "w");
    fprintf(f, "%.17g\n", loss);
    fclose_check(f);
    printf("llama_ref_dump: %s/hf, tokens (%d x %d), logits, loss %.9f\n", dir, B_, T_ + 1, loss);
    free(logits);
    free(values);
    ref_model_free(&m);
    return 0;
}
