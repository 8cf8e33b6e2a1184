// train_config.h: host-only. The trainer's settings (TrainConfig: one field per flag of train_gpt.cu's
// table, which declares each flag's name, default and help) and what is decided from them before any
// data or GPU is touched: the model family's flags resolved against each other (-model, -depth, -size,
// -encoding, -rope_theta; the defaults of the data follow the encoding), every value checked, each bad
// one named with what is allowed, and the learning rate of each step.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "../core/flags.h"
#include "../data/tokenizer_tiktoken.h"
#include "../io/hf_model.h"  // GPT_HF_VOCAB; llmc/model/spec.h: the families and their named sizes
#include "../optim/lr_schedule.h"

// One field per flag, each named by its flag; train_gpt.cu's table gives the defaults.
typedef struct {
    const char* train_pattern;  // -train
    const char* val_pattern;    // -val
    const char* vocab_path;     // -vocab
    const char* encoding;       // -encoding
    const char* model;          // -model
    int depth;                  // -depth
    const char* size;           // -size
    float rope_theta;           // -rope_theta
    const char* init;           // -init
    int B, T;                   // -b, -t
    int total_batch;            // -total_batch: tokens per optimizer step
    int steps;                  // -steps
    float lr;                   // -lr
    int warmup;                 // -warmup
    const char* schedule;       // -schedule
    float final_lr_frac;        // -final_lr_frac
    float weight_decay;         // -wd
    float beta1, beta2, eps;    // -beta1, -beta2, -eps
    float clip;                 // -clip
    const char* head;           // -head
    int recompute;              // -recompute
    int head_scratch;           // -head_scratch (MiB)
    int val_every;              // -val_every
    int val_batches;            // -val_batches
    int sample_tokens;          // -sample_tokens
    int sample_every;           // -sample_every
    float temperature;          // -temperature
    int top_k;                  // -top_k
    const char* out_dir;        // -out
    int ckpt_every;             // -ckpt_every
    int keep;                   // -keep
    const char* resume;         // -resume
    const char* export_hf;      // -export_hf
    int seed;                   // -seed
    int device;                 // -device
    int profile;                // -profile
    int gemm_tune;              // -gemm_tune
    int max_bad_steps;          // -max_bad_steps
    int gpus;                   // -gpus
    const char* nccl_init;      // -nccl_init
    int nccl_timeout;           // -nccl_timeout
    int zero;                   // -zero
} TrainConfig;

// GPT-2's sizes by depth (llmc/model/spec.h's named sizes): channels and heads (head size 64 throughout).
static int gpt2_size(int depth, int* channels, int* heads) {
    ModelConfig m;
    if (model_config_gpt2(&m, depth, GPT_HF_VOCAB, 1) != 0) return -1;
    *channels = m.channels;
    *heads = m.num_heads;
    return 0;
}

// The contexts (llmc/model/spec.h): GPT-2's 1024, the rows of its position table; the Llama-style 4096
// (RoPE: no table), config.json's max_position_embeddings.
#define GPT2_MAX_SEQ_LEN (model_spec(MODEL_FAMILY_GPT2)->max_seq_len)
#define LLAMA_MAX_SEQ_LEN (model_spec(MODEL_FAMILY_LLAMA)->max_seq_len)

static int is_llama(const TrainConfig* c) { return strcmp(c->model, "llama") == 0; }
static int max_seq_len(const TrainConfig* c) { return is_llama(c) ? LLAMA_MAX_SEQ_LEN : GPT2_MAX_SEQ_LEN; }

// The starter shards of each encoding (make data, make data-starter-cl100k, make data-starter-o200k):
// the defaults of -train and -val.
static const char* const STARTER_SHARDS[][3] = {
    {"gpt2", "data/starter/starter_train_*.bin", "data/starter/starter_val_*.bin"},
    {"cl100k_base", "data/starter_cl100k/starter_train_*.bin", "data/starter_cl100k/starter_val_*.bin"},
    {"o200k_base", "data/starter_o200k/starter_train_*.bin", "data/starter_o200k/starter_val_*.bin"},
};

// Checks the flags that depend on the model family and resolves -encoding auto; -train, -val and -vocab
// left out follow the encoding. Flags told apart from their defaults by argv: a checkpoint's settings
// never hold one of another family (settings_resume). Returns as validate.
#define BAD(flag, ...) do { snprintf(msg, n, __VA_ARGS__); return flag; } while (0)
static const char* resolve_model(TrainConfig* c, int argc, char** argv, char* msg, size_t n) {
    int llama = is_llama(c);
    ModelConfig lc;
    if (!llama && strcmp(c->model, "gpt2") != 0) BAD("-model", "-model %s: choose gpt2 or llama", c->model);
    if (strcmp(c->encoding, "auto") == 0) c->encoding = llama ? "o200k_base" : "gpt2";
    const TokenizerEncoding* enc = tokenizer_find_encoding(c->encoding);
    if (!enc) BAD("-encoding", "-encoding %s: choose %s (or auto)", c->encoding, TOKENIZER_ENCODING_NAMES);
    if (!llama && strcmp(c->encoding, "gpt2") != 0)
        BAD("-encoding", "-encoding %s: GPT-2's vocabulary is gpt2's; train -model llama on %s shards, or leave "
            "-encoding out", c->encoding, c->encoding);
    if (!llama && flag_given(argc, argv, "-size"))
        BAD("-size", "-size %s: a Llama-style size; GPT-2's size is -depth (6, 12, 24, 36, 48), or pass -model llama",
            c->size);
    if (!llama && flag_given(argc, argv, "-rope_theta"))
        BAD("-rope_theta", "-rope_theta %g: the Llama-style model's rotary base; GPT-2 has learned positions, so leave "
            "it out or pass -model llama", c->rope_theta);
    if (llama && !(c->rope_theta >= 1.0f))
        BAD("-rope_theta", "-rope_theta %g: RoPE's base must be 1 or more (1e4 and 5e5 are the usual)", c->rope_theta);
    if (llama && flag_given(argc, argv, "-depth"))
        BAD("-depth", "-depth %d: a GPT-2 size; the Llama-style model's is -size (%s)%s", c->depth, LLAMA_SIZE_NAMES,
            c->init[0] ? ", and the -init file is a Llama-style model" : ", or leave -model out for GPT-2");
    if (llama && model_config_named(&lc, MODEL_FAMILY_LLAMA, c->size, enc->vocab_size, LLAMA_MAX_SEQ_LEN) != 0)
        BAD("-size", "-size %s: the Llama-style sizes are %s", c->size, LLAMA_SIZE_NAMES);
    if (llama && c->recompute != 0)
        BAD("-recompute", "-recompute %d: recomputes GPT-2's GELU; the Llama-style model has nothing to recompute, "
            "leave it out", c->recompute);
    for (int i = 0; i < (int)(sizeof(STARTER_SHARDS) / sizeof(STARTER_SHARDS[0])); i++) {
        if (strcmp(STARTER_SHARDS[i][0], c->encoding) != 0) continue;
        if (!flag_given(argc, argv, "-train")) c->train_pattern = STARTER_SHARDS[i][1];
        if (!flag_given(argc, argv, "-val")) c->val_pattern = STARTER_SHARDS[i][2];
    }
    if (!flag_given(argc, argv, "-vocab")) c->vocab_path = enc->path;
    return NULL;
}

// Checks the flags one at a time. On the first bad value returns its flag and fills msg with
// "<flag> <value>: what is allowed"; NULL when all are valid. The model's flags are resolved already.
static const char* validate(const TrainConfig* c, char* msg, size_t n) {
    int ch, nh;
    if (!is_llama(c) && gpt2_size(c->depth, &ch, &nh) != 0)
        BAD("-depth", "-depth %d: GPT-2 sizes are 6, 12, 24, 36, 48", c->depth);
    if (c->T < 1 || c->T > max_seq_len(c))
        BAD("-t", "-t %d: the sequence length must be in [1, %d] (the model's context)", c->T, max_seq_len(c));
    if (c->B < 1) BAD("-b", "-b %d: the batch size must be at least 1", c->B);
    if ((long long)c->B * c->T > (1LL << 24))
        BAD("-b", "-b %d -t %d: B*T = %lld tokens per micro-batch is more than 16M", c->B, c->T, (long long)c->B * c->T);
    if (c->total_batch < 0 || (c->total_batch > 0 && c->total_batch % (c->B * c->T) != 0))
        BAD("-total_batch", "-total_batch %d must be a positive multiple of B*T = %d (or 0 for B*T)", c->total_batch,
            c->B * c->T);
    if (c->steps < 0 || (c->steps == 0 && !c->resume[0] && !c->init[0]))
        BAD("-steps", "-steps %d: at least one step (-steps 0 only with -resume or -init, to evaluate and sample a "
            "checkpoint or imported weights)", c->steps);
    if (!(c->lr > 0.0f)) BAD("-lr", "-lr %g: the learning rate must be above 0", c->lr);
    if (c->warmup < 0) BAD("-warmup", "-warmup %d: warm-up steps must be 0 or more", c->warmup);
    if (c->final_lr_frac < 0.0f || c->final_lr_frac > 1.0f)
        BAD("-final_lr_frac", "-final_lr_frac %g: a fraction of -lr, in [0, 1]", c->final_lr_frac);
    if (strcmp(c->schedule, "cosine") != 0 && strcmp(c->schedule, "linear") != 0)
        BAD("-schedule", "-schedule %s: choose cosine or linear", c->schedule);
    if (c->weight_decay < 0.0f) BAD("-wd", "-wd %g: weight decay must be 0 or more", c->weight_decay);
    if (c->clip < 0.0f) BAD("-clip", "-clip %g: the clipping norm must be 0 (off) or more", c->clip);
    if (c->eps <= 0.0f) BAD("-eps", "-eps %g: AdamW's epsilon must be above 0", c->eps);
    if (c->beta1 < 0.0f || c->beta1 >= 1.0f) BAD("-beta1", "-beta1 %g: must be in [0, 1)", c->beta1);
    if (c->beta2 < 0.0f || c->beta2 >= 1.0f) BAD("-beta2", "-beta2 %g: must be in [0, 1)", c->beta2);
    if (strcmp(c->head, "fused") != 0 && strcmp(c->head, "staged") != 0 && strcmp(c->head, "blocks") != 0 &&
        strcmp(c->head, "chunks") != 0 && strcmp(c->head, "unfused") != 0)
        BAD("-head", "-head %s: choose fused, staged, blocks, chunks or unfused", c->head);
    if (c->profile != 0 && c->profile != 1) BAD("-profile", "-profile %d: choose 0 or 1", c->profile);
    if (c->gemm_tune != 0 && c->gemm_tune != 1) BAD("-gemm_tune", "-gemm_tune %d: choose 0 or 1", c->gemm_tune);
    if (c->head_scratch < 0 || c->head_scratch > 65536)
        BAD("-head_scratch", "-head_scratch %d: MiB in [0, 65536] (0: sized by the head; otherwise room for 16 rows of "
            "logits: at least 4 MiB at this vocabulary)", c->head_scratch);
    if (c->recompute != 0 && c->recompute != 1) BAD("-recompute", "-recompute %d: choose 0 or 1", c->recompute);
    if (c->val_every < 0) BAD("-val_every", "-val_every %d: must be 0 (only at the end) or more", c->val_every);
    if (c->val_batches < -1 || c->val_batches == 0)
        BAD("-val_batches", "-val_batches %d: must be 1 or more, or -1 (the whole split)", c->val_batches);
    if (c->sample_tokens < 0) BAD("-sample_tokens", "-sample_tokens %d: must be 0 (none) or more", c->sample_tokens);
    if (c->sample_every < 0) BAD("-sample_every", "-sample_every %d: must be 0 (only at the end) or more", c->sample_every);
    if (c->temperature < 0.0f) BAD("-temperature", "-temperature %g: must be 0 (greedy) or more", c->temperature);
    int V = tokenizer_find_encoding(c->encoding)->vocab_size;
    if (c->top_k < 0 || c->top_k > V) BAD("-top_k", "-top_k %d: must be in [0, %d] (the vocabulary)", c->top_k, V);
    if (!c->out_dir[0]) BAD("-out", "-out \"\": an output directory is needed");
    if (c->ckpt_every < 0) BAD("-ckpt_every", "-ckpt_every %d: must be 0 (only at the end) or more", c->ckpt_every);
    if (c->keep < 0) BAD("-keep", "-keep %d: must be 0 (write none) or more", c->keep);
    if (c->max_bad_steps < 1) BAD("-max_bad_steps", "-max_bad_steps %d: must be 1 or more", c->max_bad_steps);
    if (c->device < 0) BAD("-device", "-device %d: a CUDA device's index, 0 or more (nvidia-smi lists them)", c->device);
    if (c->gpus < 1 || c->gpus > 64) BAD("-gpus", "-gpus %d: GPUs of this machine, in [1, 64]", c->gpus);
    if (strcmp(c->nccl_init, "tcp") != 0 && (strncmp(c->nccl_init, "file:", 5) != 0 || !c->nccl_init[5]))
        BAD("-nccl_init", "-nccl_init %s: choose tcp or file:PATH (a path every rank can read)", c->nccl_init);
    if (c->nccl_timeout < 1) BAD("-nccl_timeout", "-nccl_timeout %d: seconds, 1 or more", c->nccl_timeout);
    if (c->zero != 0 && c->zero != 1) BAD("-zero", "-zero %d: choose 1 (ZeRO-1, the default) or 0 (unsharded)", c->zero);
    return NULL;
}
#undef BAD

// The model of c, whose size resolve_model and validate have checked: the named size of its family, at
// the family's context; a Llama-style model with c's rotary base.
static void train_model_config(ModelConfig* mc, const TrainConfig* c, int vocab_size) {
    if (is_llama(c)) {
        model_config_named(mc, MODEL_FAMILY_LLAMA, c->size, vocab_size, LLAMA_MAX_SEQ_LEN);
        mc->rope_theta = c->rope_theta;
    } else {
        model_config_gpt2(mc, c->depth, vocab_size, GPT2_MAX_SEQ_LEN);
    }
}

// Linear warmup over `warmup` steps, then cosine or linear decay to lr · final_lr_frac at the last step
// (llmc/optim/lr_schedule.h).
// A step of the loop is below -steps, an int, so it fits the schedule's int.
static float lr_at(const TrainConfig* c, int64_t step) {
    return lr_schedule(c->lr, c->warmup, c->steps, c->final_lr_frac, strcmp(c->schedule, "linear") == 0, (int)step);
}
