// hf_init.h: host-only. train_gpt's -init: a model in Hugging Face's layout (GPT2LMHeadModel or
// LlamaForCausalLM, llmc/io/hf_model_import.h) opened, matched against the flags and read before the
// data and the GPU are touched, so that a bad file costs nothing. A Llama model's config.json gives
// -size, -encoding and -rope_theta; a GPT-2 model's tensors give -depth; a flag given must agree. A
// train_gpt checkpoint passed to -init is recognised by its magic number and refused with what to do
// with it. Every refusal names the file and exits through llmc/core/check.h.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../core/check.h"
#include "../data/tokenizer_tiktoken.h"
#include "checkpoint.h"  // CHECKPOINT_MAGIC
#include "hf_model_import.h"

// The -init file, of either family, opened before the GPU is touched.
typedef struct {
    int llama;         // a LlamaForCausalLM (lm); else a GPT2LMHeadModel (gpt)
    GptHfReader gpt;
    LlamaHfReader lm;
} InitFile;

// what a file the readers refuse should have been
#define HF_INIT_HINT "pass -init a .safetensors file, or a directory with model.safetensors or a split model's " \
                     "model.safetensors.index.json and files (and config.json: Llama's needs it)"

// -init of a train_gpt checkpoint (its magic number first), which is not weights in Hugging Face's
// layout: said so, with the two things to do with it.
static void hf_init_refuse_checkpoint(const char* path) {
    FILE* f = fopen(path, "rb");
    int32_t magic = 0;
    size_t got = f ? fread(&magic, sizeof(magic), 1, f) : 0;  // 0 for a directory or a missing file
    if (f) fclose(f);
    if (got != 1 || magic != CHECKPOINT_MAGIC) return;
    char hint[3 * CHECKPOINT_PATH_LEN + 128];
    snprintf(hint, sizeof(hint), "continue its run with -resume %s, or export it with build/export_hf %s DIR and pass "
             "-init DIR", path, path);
    check_failf(hint, "-init %s: a train_gpt checkpoint, not a model in Hugging Face's layout (safetensors)", path);
}

// A Llama -init (before the family's flags are resolved): *size from the layers of its config.json (one
// of the sizes), *encoding from its vocabulary, *rope_theta from its rope_theta; a flag given
// (size_given, theta_given; *encoding not "auto") must agree.
static void hf_init_open_llama(LlamaHfReader* r, const char* path, const char** size, const char** encoding,
                               float* rope_theta, int size_given, int theta_given) {
    if (llama_hf_open(r, path) != 0) check_failf(HF_INIT_HINT, "-init %s: %s", path, r->err);
    const ModelConfig* f = &r->config;
    const char* name = model_size_name(f);
    const TokenizerEncoding* enc = tokenizer_encoding_of_vocab(f->vocab_size);
    ModelConfig named;
    if (!name)
        check_failf("the Llama-style sizes are " LLAMA_SIZE_NAMES " (llmc/model/spec.h has their shapes)",
                    "-init %s: a model of %d layers, %d channels, %d heads (%d key/value) and FFN %d, not one of "
                    "this program's sizes", path, f->num_layers, f->channels, f->num_heads, f->num_kv_heads,
                    f->ffn_hidden);
    if (size_given && strcmp(*size, name) != 0)
        check_failf("leave -size out to take it from the file", "-init %s: a %s model, which is not -size %s", path,
                    name, *size);
    if (!enc)
        check_failf("train on shards of the model's own encoding, which must be one of these",
                    "-init %s: vocab_size %d, the vocabulary of none of this program's encodings (%s)", path,
                    f->vocab_size, TOKENIZER_ENCODING_NAMES);
    if (strcmp(*encoding, "auto") != 0 && strcmp(*encoding, enc->name) != 0)
        check_failf("leave -encoding out to take it from the file", "-init %s: a vocabulary of %d, %s's, which is "
                    "not -encoding %s", path, f->vocab_size, enc->name, *encoding);
    if (theta_given && fabs(*rope_theta - f->rope_theta) > 1e-6 * f->rope_theta)
        check_failf("leave -rope_theta out to take it from the file", "-init %s: rope_theta %g, which is not "
                    "-rope_theta %g", path, f->rope_theta, *rope_theta);
    if (model_config_named(&named, MODEL_FAMILY_LLAMA, name, f->vocab_size,
                           model_spec(MODEL_FAMILY_LLAMA)->max_seq_len) != 0 ||
        fabs(f->norm_eps - named.norm_eps) > 1e-6 * named.norm_eps)
        check_failf("the model must have been made with this program's epsilon to continue here",
                    "-init %s: rms_norm_eps %g (transformers' 1e-6 where config.json leaves it out); this program's "
                    "Llama-style models use %g", path, f->norm_eps, named.norm_eps);
    *size = name;
    *encoding = enc->name;
    *rope_theta = (float)f->rope_theta;
    printf("-init %s: a Llama-style model, so -model llama -size %s -encoding %s -rope_theta %g\n", path, *size,
           *encoding, *rope_theta);
}

// A GPT-2 -init (after the family's flags are resolved): *depth from its tensors, or checked against a
// given -depth (depth_given).
static void hf_init_open_gpt(GptHfReader* r, const char* path, int* depth, int depth_given) {
    if (gpt_hf_open(r, path) != 0) check_failf(HF_INIT_HINT, "-init %s: %s", path, r->err);
    if (!depth_given) *depth = r->num_layers;
    ModelConfig g;  // GPT-2's named sizes (llmc/model/spec.h): the channels of *depth
    if (model_config_gpt2(&g, *depth, GPT_HF_VOCAB, 1) != 0 || *depth != r->num_layers || g.channels != r->channels)
        check_failf("this program trains GPT-2's sizes (-depth 6: 384 channels, 12: 768, 24: 1024, 36: 1280, 48: "
                    "1600); leave -depth out to take it from the file", "-init %s: a model of %d layers and %d "
                    "channels%s", path, r->num_layers, r->channels,
                    depth_given ? ", which is not what -depth gives" : ", not one of GPT-2's sizes");
}

// The -init weights of the model mc, read into host memory before the GPU is touched: every value is
// checked to be finite as it is read (llmc/io/hf_model_import.h), as a checkpoint's are before -resume
// loads it. The caller gives them to the model (model_set_params: master and bf16 parameters; AdamW's
// moments zero, a fresh start) and frees them.
static float* hf_init_read(InitFile* f, const ModelConfig* mc, const char* path) {
    size_t n = model_num_params(mc);
    float* values = (float*)malloc_check(n * sizeof(float));
    int rc = f->llama ? llama_hf_load(&f->lm, mc, values) : gpt_hf_load(&f->gpt, mc, values);
    if (rc != 0)
        check_failf("the message names the tensor or file at fault: pass -init a model without it", "-init %s: %s",
                    path, f->llama ? f->lm.err : f->gpt.err);
    return values;
}
