// gpt_config.h: host-only. The GPT-2 model's sizes and its parameter tensors in llm.c's order: wte (Vp, C),
// wpe (maxT, C), ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C),
// ln2w, ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw, lnfb (C).
// Weights are (out, in). What the model is on the GPU is gpt_layout.cuh; this part is shared with the
// host-only tools (the Hugging Face export, llmc/io/gpt_hf.h), which need the layout but no CUDA.
#pragma once
#include <stddef.h>

typedef struct {
    int max_seq_len;        // maxT: rows of wpe
    int vocab_size;         // V = 50257
    int padded_vocab_size;  // Vp = 50304: rows of wte, a multiple of 128 for fast GEMMs
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C, a multiple of 8
} GptConfig;

// The most layers a model read from elsewhere may have (llmc/io/gpt_hf_import.h): GPT-2's largest has 48.
#define GPT_MAX_LAYERS 1024

enum {
    GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW, GPT_ATTPROJB, GPT_LN2W, GPT_LN2B,
    GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB, GPT_NUM_TENSORS
};

static inline void gpt_tensor_sizes(size_t s[GPT_NUM_TENSORS], const GptConfig* c) {
    size_t C = c->channels, L = c->num_layers;
    size_t v[GPT_NUM_TENSORS] = {(size_t)c->padded_vocab_size * C, (size_t)c->max_seq_len * C, L * C, L * C,
                                 L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                                 L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
    for (int i = 0; i < GPT_NUM_TENSORS; i++) s[i] = v[i];
}

static inline const char* gpt_tensor_name(int i) {
    static const char* const n[GPT_NUM_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                   "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return n[i];
}

// Weight decay and random init apply to the 2-D matrices only.
static inline int gpt_tensor_is_matrix(int i) {
    return i == GPT_WTE || i == GPT_WPE || i == GPT_QKVW || i == GPT_ATTPROJW || i == GPT_FCW || i == GPT_FCPROJW;
}
