// train_gpt.cu: pretrains a GPT-2 (d6 ... d48) or a Llama-style model (llama-30m ... llama-1b) from
// scratch on token shards, in bf16, on one GPU or on many through NCCL (-gpus N, mpirun, srun or
// torchrun-style variables; doc/multi_gpu.md).
//   make train_gpt && ./train_gpt            (d6 on the starter shards: a few minutes, visibly learns)
//   ./train_gpt -model llama                 (llama-30m on the starter shards in o200k_base)
//   ./train_gpt -h                           (every flag with its default)
// The models and their layers are in llmc/ (gpt.cuh and llama.cuh wire them, train_model.cuh puts both
// behind one interface); this file is the program around them: flags, the learning-rate schedule, the
// loop with gradient accumulation, validation and samples (llmc/train/evaluate.cuh), the log, and checkpoints
// with bitwise-identical resume (Ctrl-C writes one and exits cleanly); -init starts from weights in
// Hugging Face's layout (llmc/io/gpt_hf_import.h, llmc/io/llama_hf_import.h) and -export_hf writes the model
// in that layout (llmc/io/gpt_hf.h, llmc/io/llama_hf.h, doc/interop.md).
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/train/train_model.cuh"      // TrainModel: GPT-2 or Llama-style, build / step / checkpoint / free
#include "llmc/io/gpt_hf_import.h"         // -init: GPT-2 weights in Hugging Face's layout
#include "llmc/io/llama_hf_import.h"       // -init: Llama weights in Hugging Face's layout
#include "llmc/core/flags.h"               // the flag table's parser
#include "llmc/data/dataloader.h"          // DataLoader: (B, T) batches from shards
#include "llmc/data/tokenizer_tiktoken.h"  // the encodings (gpt2, cl100k_base, o200k_base): ids and decoding, for samples
#include "llmc/train/evaluate.cuh"         // the val loss, and text samples (llmc/model/sample.h draws the tokens)
#include "llmc/io/checkpoint_dir.h"        // the run's checkpoint directory: names, latest, -resume, keep K
#include "llmc/dist/dist.cuh"              // data-parallel runs: launch environment, rendezvous, NCCL (doc/multi_gpu.md)
#include "llmc/dist/launcher.h"            // -gpus N: one process per GPU of this machine
#include "llmc/dist/dist_socket.h"         // dist_now: the monotonic clock of the timings
#include "llmc/optim/lr_schedule.h"        // the learning rate of each step: warmup, then cosine or linear decay
#include "llmc/core/gpu_peak.h"            // the GPU's peak bf16 FLOP/s, for the MFU

// config.json says which epsilon the exported model's LayerNorms use: it must be the one we compute with
static_assert(LN_EPS == (float)GPT_HF_LN_EPS, "llmc/io/gpt_hf.h's GPT_HF_LN_EPS must equal llmc/layers/layernorm.cuh's LN_EPS");

// --- flags ---------------------------------------------------------------------------------------

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

// The one declaration of every flag: name, destination, default, help.
static int train_flags(TrainConfig* c, Flag* f) {
    const Flag table[] = {
        {"-train", FLAG_STR, &c->train_pattern, "data/starter/starter_train_*.bin", "data", "train shards (glob pattern); other encodings: data/starter_o200k/ or data/starter_cl100k/starter_train_*.bin"},
        {"-val", FLAG_STR, &c->val_pattern, "data/starter/starter_val_*.bin", "data", "validation shards (glob pattern); other encodings: as -train"},
        {"-encoding", FLAG_STR, &c->encoding, "auto", "data", "token ids: gpt2 | cl100k_base | o200k_base (auto: gpt2 for -model gpt2, its only one; o200k_base for llama)"},
        {"-vocab", FLAG_STR, &c->vocab_path, "data/gpt2/vocab.bpe", "data", "the encoding's file, to decode samples (tiktoken's: data/tiktoken/<encoding>.json)"},
        {"-model", FLAG_STR, &c->model, "gpt2", "model", "gpt2 | llama (Llama-style: RMSNorm, RoPE, SwiGLU, GQA, untied head, no biases)"},
        {"-depth", FLAG_INT, &c->depth, "6", "model", "GPT-2 size (-model gpt2): 6 (30M), 12 (124M), 24, 36, 48 (1.5B)"},
        {"-size", FLAG_STR, &c->size, "llama-30m", "model", "Llama-style size (-model llama): " LLAMA_SIZE_NAMES},
        {"-rope_theta", FLAG_FLOAT, &c->rope_theta, "500000", "model", "RoPE's base θ (-model llama; Llama 2 used 1e4, Llama 3 5e5)"},
        {"-init", FLAG_STR, &c->init, "", "model", "start from weights in Hugging Face's layout (GPT2LMHeadModel or LlamaForCausalLM): a .safetensors file, or a directory with model.safetensors or a split model's model.safetensors.index.json and files (and config.json: Llama's needs it); sets -model, -depth or -size, -encoding, -rope_theta; fresh optimizer"},
        {"-t", FLAG_INT, &c->T, "256", "batch", "sequence length T (at most 1024 for GPT-2, 4096 for llama)"},
        {"-b", FLAG_INT, &c->B, "32", "batch", "micro-batch size B (sequences per forward)"},
        {"-total_batch", FLAG_INT, &c->total_batch, "0", "batch", "tokens per optimizer step, a multiple of B*T (0: B*T)"},
        {"-steps", FLAG_INT, &c->steps, "300", "optimizer", "optimizer steps in all (0 with -resume: evaluate and sample only)"},
        {"-lr", FLAG_FLOAT, &c->lr, "1e-3", "optimizer", "peak learning rate"},
        {"-warmup", FLAG_INT, &c->warmup, "30", "optimizer", "linear warmup steps"},
        {"-schedule", FLAG_STR, &c->schedule, "cosine", "optimizer", "decay after warmup: cosine | linear"},
        {"-final_lr_frac", FLAG_FLOAT, &c->final_lr_frac, "0.1", "optimizer", "final learning rate as a fraction of -lr"},
        {"-wd", FLAG_FLOAT, &c->weight_decay, "0.1", "optimizer", "AdamW weight decay (2-D weights only)"},
        {"-beta1", FLAG_FLOAT, &c->beta1, "0.9", "optimizer", "AdamW beta1"},
        {"-beta2", FLAG_FLOAT, &c->beta2, "0.95", "optimizer", "AdamW beta2"},
        {"-eps", FLAG_FLOAT, &c->eps, "1e-8", "optimizer", "AdamW epsilon"},
        {"-clip", FLAG_FLOAT, &c->clip, "1.0", "optimizer", "clip gradients to this global norm (0: off)"},
        {"-head", FLAG_STR, &c->head, "fused", "memory", "LM head: fused (no logits stored: the fastest path that fits) | staged | blocks | chunks | unfused"},
        {"-recompute", FLAG_INT, &c->recompute, "0", "memory", "1: recompute GELU outputs in the backward (GPT-2)"},
        {"-head_scratch", FLAG_INT, &c->head_scratch, "0", "memory", "MiB of scratch of the fused head (0: what its chunks need, at most 1024 and a quarter of the free GPU memory)"},
        {"-val_every", FLAG_INT, &c->val_every, "50", "eval", "validation loss every N steps (0: only at the end)"},
        {"-val_batches", FLAG_INT, &c->val_batches, "20", "eval", "batches per validation (-1: the whole split)"},
        {"-sample_tokens", FLAG_INT, &c->sample_tokens, "64", "sample", "tokens per sample, one at the end (0: none)"},
        {"-sample_every", FLAG_INT, &c->sample_every, "0", "sample", "also sample every N steps (0: only at the end)"},
        {"-temperature", FLAG_FLOAT, &c->temperature, "1.0", "sample", "softmax temperature (0: greedy)"},
        {"-top_k", FLAG_INT, &c->top_k, "0", "sample", "sample among the k most likely tokens (0: all)"},
        {"-out", FLAG_STR, &c->out_dir, "out", "checkpoint", "output directory: log.txt, ckpt_<step>.bin, latest"},
        {"-ckpt_every", FLAG_INT, &c->ckpt_every, "0", "checkpoint", "checkpoint every N steps (0: only at the end and on Ctrl-C)"},
        {"-keep", FLAG_INT, &c->keep, "2", "checkpoint", "keep the last K checkpoints (0: write none)"},
        {"-resume", FLAG_STR, &c->resume, "", "checkpoint", "continue from: latest (of -out), a directory, or a ckpt file"},
        {"-export_hf", FLAG_STR, &c->export_hf, "", "checkpoint", "at the end, write the model to this directory for Hugging Face transformers"},
        {"-seed", FLAG_INT, &c->seed, "42", "run", "seed of the init, the data order and the sampler"},
        {"-device", FLAG_INT, &c->device, "0", "run", "CUDA device"},
        {"-profile", FLAG_INT, &c->profile, "0", "run", "1: print the GPU time per step by kind of work at the end"},
        {"-gemm_tune", FLAG_INT, &c->gemm_tune, "0", "run", "1: at each GEMM shape's first call, keep cuBLASLt's fastest algorithm of those that give the heuristic's bits"},
        {"-max_bad_steps", FLAG_INT, &c->max_bad_steps, "5", "run", "stop (with a checkpoint) after N steps in a row with a non-finite loss or norm, each skipped"},
        {"-gpus", FLAG_INT, &c->gpus, "1", "multi-GPU", "GPUs of this machine: N > 1 starts one process per GPU (leave it out under mpirun, srun or torchrun-style variables)"},
        {"-nccl_init", FLAG_STR, &c->nccl_init, "tcp", "multi-GPU", "how the ranks meet: tcp (rank 0 at MASTER_ADDR:MASTER_PORT) | file:PATH (on a file system every rank sees)"},
        {"-nccl_timeout", FLAG_INT, &c->nccl_timeout, "600", "multi-GPU", "seconds the ranks' meeting, or a collective, may make no progress before the run stops"},
        {"-zero", FLAG_INT, &c->zero, "1", "multi-GPU", "1: shard the fp32 master weights and AdamW state over the GPUs (ZeRO-1); 0: keep all of it on every GPU, the gradients all-reduced (for comparison)"},
    };
    int n = (int)(sizeof(table) / sizeof(table[0]));
    memcpy(f, table, sizeof(table));
    return n;
}
static void usage(const Flag* f, int n) {
    printf("usage: ./train_gpt [flag value]...\n");
    const char* groups[] = {"data", "model", "batch", "optimizer", "memory", "eval", "sample", "checkpoint", "run",
                            "multi-GPU"};
    for (int g = 0; g < (int)(sizeof(groups) / sizeof(groups[0])); g++) {
        printf("%s:\n", groups[g]);
        for (int i = 0; i < n; i++)
            if (strcmp(f[i].group, groups[g]) == 0)
                printf("  %-15s %-62s (default %s)\n", f[i].name, f[i].help, f[i].def[0] ? f[i].def : "none");
    }
}

static void parse_flags(TrainConfig* c, int argc, char** argv) {
    Flag f[MAX_FLAGS];
    int n = train_flags(c, f);
    if (flags_parse(f, n, argc, argv)) { usage(f, n); exit(EXIT_SUCCESS); }
}

// --- the model family ----------------------------------------------------------------------------

// GPT-2's sizes by depth: channels and heads (head size 64 throughout).
static int gpt2_size(int depth, int* channels, int* heads) {
    const int table[][3] = {{6, 384, 6}, {12, 768, 12}, {24, 1024, 16}, {36, 1280, 20}, {48, 1600, 25}};
    for (int i = 0; i < 5; i++)
        if (table[i][0] == depth) { *channels = table[i][1]; *heads = table[i][2]; return 0; }
    return -1;
}

#define GPT2_MAX_SEQ_LEN 1024    // GPT-2's context: the rows of its position table
#define GPT2_PADDED_VOCAB 50304  // 50257 padded to a multiple of 128
#define LLAMA_MAX_SEQ_LEN 4096   // the Llama-style context (RoPE: no table); config.json's max_position_embeddings

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
    LlamaConfig lc;
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
    if (llama && llama_config_named(&lc, c->size, enc->vocab_size, LLAMA_MAX_SEQ_LEN) != 0)
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

// --- settings kept in checkpoints -----------------------------------------------------------------

// The flags a checkpoint records. On -resume each one left off the command line is taken from the
// checkpoint, so `./train_gpt -resume latest` continues the run as it was started. The first seven
// decide the model and the data stream: given with another value they are an error. The others may be
// changed (a longer -steps, another -lr ...), with a note that the run then differs from an
// uninterrupted one. Each family records its own: -depth for GPT-2 (whose settings are what they were
// before the Llama-style family existed, so its checkpoints are too), -model, -size, -encoding and
// -rope_theta for llama.
static const char* const kept_flags[] = {"-model", "-depth", "-size", "-encoding", "-rope_theta", "-b", "-t", "-seed",
                                         "-total_batch", "-steps", "-lr", "-warmup", "-schedule", "-final_lr_frac",
                                         "-wd", "-beta1", "-beta2", "-eps", "-clip"};
#define KEPT_FLAGS_MUST_MATCH 8
#define N_KEPT_FLAGS ((int)(sizeof(kept_flags) / sizeof(kept_flags[0])))

static int kept_flag_applies(const TrainConfig* c, const char* name) {
    if (strcmp(name, "-depth") == 0) return !is_llama(c);
    if (strcmp(name, "-model") == 0 || strcmp(name, "-size") == 0 || strcmp(name, "-encoding") == 0 ||
        strcmp(name, "-rope_theta") == 0)
        return is_llama(c);
    return 1;
}

// "-depth 6 -b 32 ...": the kept flags of c that apply to its family, for a checkpoint.
static void settings_text(char* out, size_t n, TrainConfig* c) {
    Flag f[MAX_FLAGS];
    int nf = train_flags(c, f);
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < N_KEPT_FLAGS && len < n; i++) {
        if (!kept_flag_applies(c, kept_flags[i])) continue;
        char v[64];
        flag_format(v, sizeof(v), flag_find(f, nf, kept_flags[i]));
        len += (size_t)snprintf(out + len, n - len, "%s%s %s", len ? " " : "", kept_flags[i], v);
    }
}

// Applies the settings text of checkpoint `path` to c (see kept_flags). `text` must outlive c: string
// flags point into it.
static void settings_resume(TrainConfig* c, char* text, const char* path, int argc, char** argv) {
    Flag f[MAX_FLAGS];
    int nf = train_flags(c, f);
    char* save = NULL;
    for (char* name = strtok_r(text, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        char* value = strtok_r(NULL, " ", &save);
        const Flag* fl = flag_find(f, nf, name);
        int k = 0;
        while (k < N_KEPT_FLAGS && strcmp(kept_flags[k], name) != 0) k++;
        if (!fl || !value || k == N_KEPT_FLAGS || !kept_flag_applies(c, name)) {
            fprintf(stderr, "error: checkpoint %s records %s setting \"%s\"%s: written by another version of "
                    "train_gpt; start without -resume\n", path, fl && k < N_KEPT_FLAGS ? "the" : "an unknown", name,
                    fl && k < N_KEPT_FLAGS ? (is_llama(c) ? ", which a Llama-style model does not have"
                                                          : ", which a GPT-2 model does not have") : "");
            exit(EXIT_FAILURE);
        }
        if (!flag_given(argc, argv, name)) {
            char origin[CHECKPOINT_PATH_LEN + 160];
            snprintf(origin, sizeof(origin), " in the settings of the checkpoint %s\n  hint: pass %s with a valid value "
                     "to override it, or resume another checkpoint", path, name);
            if (flag_set(fl, value, origin) != 0) exit(EXIT_FAILURE);
            continue;
        }
        char now[64];
        flag_format(now, sizeof(now), fl);
        if (strcmp(now, value) == 0 || (strcmp(name, "-steps") == 0 && c->steps == 0)) continue;
        if (k < KEPT_FLAGS_MUST_MATCH) {
            fprintf(stderr, "error: %s %s: the checkpoint %s was written with %s %s, which must match to resume (it "
                    "decides the model or the data stream)\n  hint: leave %s out (it is taken from the checkpoint), "
                    "or start without -resume\n", name, now, path, name, value, name);
            exit(EXIT_FAILURE);
        }
        printf("note: %s %s, the checkpoint's run had %s %s: the resumed run will differ from an uninterrupted one\n",
               name, now, name, value);
    }
}

// -resume: the checkpoint's header says its family. -model left out is taken from it (a GPT-2
// checkpoint's settings do not name the family); given, it must be the checkpoint's, else the run stops
// here, before the data and the GPU, naming the file and both families.
static void model_from_checkpoint(TrainConfig* c, const CheckpointReader* r, const char* path, int argc, char** argv) {
    int family = r->state.model.family;
    const char* name = family == CHECKPOINT_FAMILY_LLAMA ? "llama" : "gpt2";
    if (!flag_given(argc, argv, "-model")) c->model = name;
    if (strcmp(c->model, name) == 0) return;
    fprintf(stderr, "error: -model %s: the checkpoint %s holds a %s model (-model %s), another model family\n  hint: "
            "leave -model out (it is taken from the checkpoint), or start without -resume\n", c->model, path,
            checkpoint_family_name(family), name);
    exit(EXIT_FAILURE);
}

// Exits when `flag` is not NULL: the first bad flag that resolve_model or validate found, msg its
// message. A value taken from the checkpoint's settings (ckpt_path, NULL when not resuming) is said to
// come from there.
static void exit_if_bad(const char* flag, const char* msg, const char* ckpt_path, int argc, char** argv) {
    if (!flag) return;
    fprintf(stderr, "error: %s\n", msg);
    int kept = 0;
    for (int k = 0; k < N_KEPT_FLAGS; k++) kept |= strcmp(kept_flags[k], flag) == 0;
    if (ckpt_path && kept && !flag_given(argc, argv, flag))
        fprintf(stderr, "  the value is from the settings of the checkpoint %s\n  hint: pass %s with a valid value "
                "to override it, or resume another checkpoint\n", ckpt_path, flag);
    exit(EXIT_FAILURE);
}

// The run's outputs, checked at start-up, before any training it would lose: -out must be a directory
// this process can create or write in (llmc/io/checkpoint_dir.h), and -export_hf's directory one that
// an export can be written to (llmc/io/hf_files.h: absent, empty or an earlier export; GPT-2's also
// needs its tokenizer files), not -out itself. Nothing is created. Exits naming the flag.
static void check_outputs(const TrainConfig* c, const TokenizerEncoding* enc) {
    char err[HF_ERR_LEN];
    if (checkpoint_check_dir(c->out_dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: -out %s: %s\n  hint: pass -out a directory you can write to\n", c->out_dir, err);
        exit(EXIT_FAILURE);
    }
    if (!c->export_hf[0]) return;
    char a[CHECKPOINT_PATH_LEN], b[CHECKPOINT_PATH_LEN];
    snprintf(a, sizeof(a), "%s", c->export_hf);
    snprintf(b, sizeof(b), "%s", c->out_dir);
    for (size_t n = strlen(a); n > 1 && a[n - 1] == '/'; n--) a[n - 1] = '\0';  // the same path with or without
    for (size_t n = strlen(b); n > 1 && b[n - 1] == '/'; n--) b[n - 1] = '\0';  // trailing slashes
    int rc = 0;
    if (strcmp(a, b) == 0) {
        snprintf(err, sizeof(err), "the directory of -out, which holds the run's log and checkpoints");
        rc = -1;
    } else if (is_llama(c)) {
        rc = hf_export_check(c->export_hf, err, sizeof(err));
    } else {
        GptConfig g;
        memset(&g, 0, sizeof(g));
        g.vocab_size = enc->vocab_size;
        rc = gpt_hf_export_check(c->export_hf, &g, c->vocab_path, err, sizeof(err));
    }
    if (rc != 0) {
        fprintf(stderr, "error: -export_hf %s: %s\n  hint: the export is written when the run ends; pass -export_hf "
                "a new directory (or an earlier export's)\n", c->export_hf, err);
        exit(EXIT_FAILURE);
    }
}

// --- schedule, throughput ------------------------------------------------------------------------

// Linear warmup over `warmup` steps, then cosine or linear decay to lr · final_lr_frac at the last step
// (llmc/optim/lr_schedule.h).
// A step of the loop is below -steps, an int, so it fits the schedule's int.
static float lr_at(const TrainConfig* c, int64_t step) {
    return lr_schedule(c->lr, c->warmup, c->steps, c->final_lr_frac, strcmp(c->schedule, "linear") == 0, (int)step);
}

// Peak dense bf16 tensor FLOP/s of the device, the denominator of MFU (llmc/core/gpu_peak.h): the datasheet's
// figure for GPUs known by name, else the clock-based estimate; 0 when unknown. *source says which.
static double gpu_peak_bf16_flops(int device, const char** source) {
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, device));
    double tflops = gpu_peak_tflops_by_name(prop.name);
    if (tflops > 0.0) {
        *source = "datasheet";
        return tflops * 1e12;
    }
    int khz = 0;
    cuda_check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    *source = "SMs x clock x FLOP/clock";
    return gpu_peak_flops_by_clock(prop.major, prop.minor, prop.multiProcessorCount, khz);
}

// MFU in percent: tokens/s of all `world` GPUs times the model's FLOPs per token, over their peak
static double mfu_percent(double tokens_per_s, double flops_per_token, double peak, int world) {
    return 100.0 * tokens_per_s * flops_per_token / (peak * world);
}

static double mib(size_t bytes) { return bytes / 1048576.0; }

// One row of the config table: the value is formatted, then padded to the column.
static void table_row(const char* name, const char* fmt, ...) {
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    printf("| %-20s | %-48s |\n", name, value);
}

// --- signals -------------------------------------------------------------------------------------

// Ctrl-C or SIGTERM: the loop finishes its step, writes a checkpoint and exits. SA_RESETHAND: a second
// Ctrl-C kills at once (a checkpoint being written then is left as a .tmp file, never under its name).
static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int sig) { stop_signal = sig; }

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// --- log, checkpoints ----------------------------------------------------------------------------

// <out>/log.txt, one line per event, `step N key value ...` (lines starting with # are comments):
//   step 12 train_loss 5.43210983 norm 0.452113628 lr 1.0000e-03 ms 20.9 tok_s 392000
//   step 50 val_loss 5.77123451
//   step 50 checkpoint out/ckpt_00000050.bin
// Losses and norms have 9 significant digits, so two logs compare bitwise. A fresh run starts the log
// empty; a resumed run keeps the lines up to its checkpoint's step and drops the later ones (the
// interrupted run's work after its last checkpoint), so the log reads as one uninterrupted run.
static FILE* log_open(const char* dir, int64_t resume_step, int argc, char** argv) {
    char path[CHECKPOINT_PATH_LEN + 16], tmp[CHECKPOINT_PATH_LEN + 24];
    snprintf(path, sizeof(path), "%s/log.txt", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* out = fopen_check(tmp, "wb");
    FILE* old = resume_step >= 0 ? fopen(path, "rb") : NULL;
    if (old) {
        char* line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, old) > 0) {
            long long step;
            if (sscanf(line, "step %lld", &step) != 1 || step <= resume_step) fputs(line, out);
        }
        free(line);
        fclose(old);
    }
    fprintf(out, "#");
    for (int a = 0; a < argc; a++) fprintf(out, " %s", argv[a]);
    fprintf(out, "\n");
    fclose_check(out);
    if (rename(tmp, path) != 0) { perror(path); exit(EXIT_FAILURE); }
    FILE* f = fopen_check(path, "ab");
    setvbuf(f, NULL, _IOLBF, 0);  // whole lines reach the file as they are written
    return f;
}

// The checkpoint after `step` steps: the file, then the `latest` marker, then older ones pruned. Every
// rank calls it (the state is gathered from their shards); rank 0 writes.
static void save_checkpoint(TrainModel* m, const TrainConfig* c, int64_t step, uint64_t sample_rng,
                            DataLoaderPosition data, const char* settings, FILE* log_file, const GpuContext* ctx) {
    CheckpointState s;
    memset(&s, 0, sizeof(s));
    s.step = step;
    s.rng = sample_rng;
    s.data = data;
    snprintf(s.settings, sizeof(s.settings), "%s", settings);
    char path[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN];
    checkpoint_path(path, sizeof(path), c->out_dir, step);
    double t0 = dist_now();
    checkpoint_check(err, train_model_save_checkpoint(m, path, &s, err, sizeof(err), ctx));  // every rank: it gathers
    if (m->comm->rank != 0) return;
    checkpoint_check(err, checkpoint_mark_latest(c->out_dir, path, err, sizeof(err)));
    checkpoint_check(err, checkpoint_prune(c->out_dir, c->keep, step, err, sizeof(err)));
    printf("checkpoint %s (%.1f MiB, %.1f s)\n", path, mib(3 * m->num_params * sizeof(float)), dist_now() - t0);
    fprintf(log_file, "step %lld checkpoint %s\n", (long long)step, path);
}

// A fault the run cannot go on from (a bad shard, too many bad steps): the state after `step` steps is
// checkpointed (when -keep allows and there is work since the start), then the program exits 1 with
// `what` and `hint`. every_rank: all ranks met the fault together (too many bad steps: they share the
// flags), so they can gather the state; a fault of one rank (its data) ends a multi-GPU run without a
// checkpoint: that rank exits, and the control channel stops the others (llmc/dist/dist_control.h).
static void stop_with_checkpoint(TrainModel* m, const TrainConfig* c, int64_t step, int64_t start_step, uint64_t sample_rng,
                                 DataLoaderPosition data, const char* settings, FILE* log_file, const char* what,
                                 const char* hint, int every_rank, const GpuContext* ctx) {
    fprintf(log_file, "step %lld stopped fault\n", (long long)step);
    char done[CHECKPOINT_PATH_LEN + 96] = "";
    if (m->comm->world > 1 && !every_rank) {
        snprintf(done, sizeof(done), "no checkpoint written (a fault of this rank alone); the last one stands");
    } else if (c->keep > 0 && step > start_step) {
        save_checkpoint(m, c, step, sample_rng, data, settings, log_file, ctx);
        char path[CHECKPOINT_PATH_LEN];
        checkpoint_path(path, sizeof(path), c->out_dir, step);
        snprintf(done, sizeof(done), "the state after step %lld is saved in %s", (long long)step, path);
    } else {
        snprintf(done, sizeof(done), "no checkpoint written (%s)", c->keep == 0 ? "-keep 0" : "no step done since the start");
    }
    fprintf(stderr, "error: %s\n  %s\n  hint: %s\n", what, done, hint);
    exit(EXIT_FAILURE);
}

// LLMC_TEST_NAN_STEP=A or A-B (test-only, never set in normal use): a NaN is written into the gradient at
// steps A..B (1-based), so that the tests can see bad steps skipped and -max_bad_steps stop the run.
static void test_nan_steps(int* from, int* to) {
    const char* e = getenv("LLMC_TEST_NAN_STEP");
    *from = *to = 0;
    if (!e || !*e) return;
    if (sscanf(e, "%d-%d", from, to) == 1) *to = *from;
    printf("test: a NaN is injected into the gradient at steps %d..%d (LLMC_TEST_NAN_STEP)\n", *from, *to);
}

// --- Hugging Face interop: -init (llmc/io/gpt_hf_import.h, llmc/io/llama_hf_import.h), -export_hf ------

// The -init file, of either family, opened before the GPU is touched.
typedef struct {
    int llama;         // a LlamaForCausalLM (lm); else a GPT2LMHeadModel (gpt)
    GptHfReader gpt;
    LlamaHfReader lm;
} InitFile;

static void init_fail(const TrainConfig* c, const char* msg) {
    fprintf(stderr, "error: -init %s: %s\n", c->init, msg);
    exit(EXIT_FAILURE);
}

// -init of a train_gpt checkpoint (its magic number first), which is not weights in Hugging Face's
// layout: said so, with the two things to do with it.
static void init_not_checkpoint(const TrainConfig* c) {
    FILE* f = fopen(c->init, "rb");
    int32_t magic = 0;
    size_t got = f ? fread(&magic, sizeof(magic), 1, f) : 0;  // 0 for a directory or a missing file
    if (f) fclose(f);
    if (got != 1 || magic != CHECKPOINT_MAGIC) return;
    fprintf(stderr, "error: -init %s: a train_gpt checkpoint, not a model in Hugging Face's layout (safetensors)\n"
            "  hint: continue its run with -resume %s, or export it with build/export_hf %s DIR and pass -init DIR\n",
            c->init, c->init, c->init);
    exit(EXIT_FAILURE);
}

// -model left out: the -init file's family (a Llama model's tensors are named model.embed_tokens ...).
static void init_family(TrainConfig* c, int argc, char** argv) {
    if (!flag_given(argc, argv, "-model") && llama_hf_detect(c->init)) c->model = "llama";
}

// A Llama -init (before resolve_model): -size from the layers of its config.json (one of the sizes),
// -encoding from its vocabulary, -rope_theta from its rope_theta; a flag given must agree.
static void init_open_llama(LlamaHfReader* r, TrainConfig* c, int argc, char** argv) {
    if (llama_hf_open(r, c->init) != 0) init_fail(c, r->err);
    const LlamaConfig* f = &r->config;
    const char* size = llama_size_name(f);
    const TokenizerEncoding* enc = tokenizer_encoding_of_vocab(f->vocab_size);
    LlamaConfig named;
    char msg[768] = "";
    if (!size)
        snprintf(msg, sizeof(msg), "a model of %d layers, %d channels, %d heads (%d key/value) and FFN %d, not one of "
                 "this program's sizes\n  hint: the Llama-style sizes are %s (llmc/model/llama_config.h has their shapes)",
                 f->num_layers, f->channels, f->num_heads, f->num_kv_heads, f->ffn_hidden, LLAMA_SIZE_NAMES);
    else if (flag_given(argc, argv, "-size") && strcmp(c->size, size) != 0)
        snprintf(msg, sizeof(msg), "a %s model, which is not -size %s\n  hint: leave -size out to take it from the "
                 "file", size, c->size);
    else if (!enc)
        snprintf(msg, sizeof(msg), "vocab_size %d, the vocabulary of none of this program's encodings (%s)\n  hint: "
                 "train on shards of the model's own encoding, which must be one of these", f->vocab_size,
                 TOKENIZER_ENCODING_NAMES);
    else if (strcmp(c->encoding, "auto") != 0 && strcmp(c->encoding, enc->name) != 0)
        snprintf(msg, sizeof(msg), "a vocabulary of %d, %s's, which is not -encoding %s\n  hint: leave -encoding out "
                 "to take it from the file", f->vocab_size, enc->name, c->encoding);
    else if (flag_given(argc, argv, "-rope_theta") && fabs(c->rope_theta - f->rope_theta) > 1e-6 * f->rope_theta)
        snprintf(msg, sizeof(msg), "rope_theta %g, which is not -rope_theta %g\n  hint: leave -rope_theta out to take "
                 "it from the file", f->rope_theta, c->rope_theta);
    else if (llama_config_named(&named, size, f->vocab_size, LLAMA_MAX_SEQ_LEN) != 0 ||
             fabs(f->norm_eps - named.norm_eps) > 1e-6 * named.norm_eps)
        snprintf(msg, sizeof(msg), "rms_norm_eps %g (transformers' 1e-6 where config.json leaves it out); this "
                 "program's Llama-style models use %g", f->norm_eps, named.norm_eps);
    if (msg[0]) init_fail(c, msg);
    c->size = size;
    c->encoding = enc->name;
    c->rope_theta = (float)f->rope_theta;
    printf("-init %s: a Llama-style model, so -model llama -size %s -encoding %s -rope_theta %g\n", c->init, c->size,
           c->encoding, c->rope_theta);
}

// A GPT-2 -init (after resolve_model): the depth from its tensors, or checked against a given -depth.
static void init_open_gpt(GptHfReader* r, TrainConfig* c, int argc, char** argv) {
    if (gpt_hf_open(r, c->init) != 0) init_fail(c, r->err);
    int given = flag_given(argc, argv, "-depth"), ch, nh;
    if (!given) c->depth = r->num_layers;
    if (gpt2_size(c->depth, &ch, &nh) != 0 || c->depth != r->num_layers || ch != r->channels) {
        fprintf(stderr, "error: -init %s: a model of %d layers and %d channels%s\n  hint: this program trains "
                "GPT-2's sizes (-depth 6: 384 channels, 12: 768, 24: 1024, 36: 1280, 48: 1600); leave -depth out to "
                "take it from the file\n", c->init, r->num_layers, r->channels,
                given ? ", which is not what -depth gives" : ", not one of GPT-2's sizes");
        exit(EXIT_FAILURE);
    }
}

// The -init weights of the model mc, read into host memory before the GPU is touched: every value is
// checked to be finite as it is read (llmc/io/gpt_hf_import.h, llama_hf_import.h), as a checkpoint's are
// before -resume loads it. The caller gives them to the model (train_model_set_params: master and bf16
// parameters; AdamW's moments zero, a fresh start) and frees them.
static float* init_read(InitFile* f, const TrainModelConfig* mc, const TrainConfig* c) {
    size_t n = (size_t)train_model_checkpoint_of(mc).num_params;
    float* values = (float*)malloc_check(n * sizeof(float));
    int rc = f->llama ? llama_hf_load(&f->lm, &mc->llama, values) : gpt_hf_load(&f->gpt, &mc->gpt, values);
    if (rc != 0) init_fail(c, f->llama ? f->lm.err : f->gpt.err);
    return values;
}

// The model's fp32 master weights to dir, through the export tool's code (GPT-2: build/export_hf).
// Every rank calls it (the weights are gathered from their shards); rank 0 writes.
static void export_hf(TrainModel* m, const char* dir, const char* vocab_path, int eot, const GpuContext* ctx) {
    char err[HF_ERR_LEN];
    double t0 = dist_now();
    if (train_model_export_hf(m, dir, vocab_path, eot, err, sizeof(err), ctx) != 0) {
        fprintf(stderr, "error: -export_hf %s: %s\n", dir, err);
        exit(EXIT_FAILURE);
    }
    if (m->comm->rank == 0)
        printf("exported to %s/ for Hugging Face transformers (%s, fp32 master weights, %.1f MiB, %.1f s)\n", dir,
               m->family == CHECKPOINT_FAMILY_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM",
               mib(m->num_params * sizeof(float)), dist_now() - t0);
}

// --- main ----------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    TrainConfig cfg;
    parse_flags(&cfg, argc, argv);
    // -resume: the checkpoint's header and settings first, so that flags left out come from it
    CheckpointReader ckpt;
    char ckpt_path[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN], saved_settings[CHECKPOINT_SETTINGS_MAX];
    int resumed = cfg.resume[0] != '\0';
    if (resumed && cfg.init[0]) {
        fprintf(stderr, "error: -resume %s -init %s: -resume continues a run, -init starts one from weights; give "
                "one\n", cfg.resume, cfg.init);
        exit(EXIT_FAILURE);
    }
    // -init: the file's family, and a Llama model's sizes and encoding, before the flags that depend on them
    InitFile init;
    memset(&init, 0, sizeof(init));
    if (cfg.init[0]) init_not_checkpoint(&cfg);
    if (cfg.init[0]) init_family(&cfg, argc, argv);
    if (cfg.init[0] && is_llama(&cfg)) {
        init.llama = 1;
        init_open_llama(&init.lm, &cfg, argc, argv);
    }
    if (resumed) {
        checkpoint_check(err, checkpoint_resolve(ckpt_path, sizeof(ckpt_path), cfg.resume, cfg.out_dir, err, sizeof(err)));
        checkpoint_check(ckpt.err, checkpoint_reader_open(&ckpt, ckpt_path));
        model_from_checkpoint(&cfg, &ckpt, ckpt_path, argc, argv);
        memcpy(saved_settings, ckpt.state.settings, sizeof(saved_settings));
        settings_resume(&cfg, saved_settings, ckpt_path, argc, argv);
    }
    char msg[512];
    exit_if_bad(resolve_model(&cfg, argc, argv, msg, sizeof(msg)), msg, resumed ? ckpt_path : NULL, argc, argv);
    const TokenizerEncoding* encoding = tokenizer_find_encoding(cfg.encoding);
    // -init of GPT-2: the file's header first, so that a bad file fails before the GPU is touched and the
    // depth can come from its tensors
    if (cfg.init[0] && !init.llama) init_open_gpt(&init.gpt, &cfg, argc, argv);
    exit_if_bad(validate(&cfg, msg, sizeof(msg)), msg, resumed ? ckpt_path : NULL, argc, argv);
    // the checkpoint's step is in [0, CHECKPOINT_MAX_STEP] (its reader checks): kept 64-bit, as it is stored
    int64_t start_step = resumed ? ckpt.state.step : 0;
    int64_t train_steps = cfg.steps == 0 ? 0 : cfg.steps - start_step;  // 0: evaluate and sample only
    if (train_steps < 0) {
        fprintf(stderr, "error: -steps %d: the checkpoint %s is at step %lld already\n  hint: pass a larger -steps to "
                "continue training, or -steps 0 to only evaluate and sample it\n", cfg.steps, ckpt_path,
                (long long)start_step);
        exit(EXIT_FAILURE);
    }

    // -gpus N: this process becomes the launcher of N ranks, each this program without the flag
    DistRun dist;
    dist_detect(&dist, cfg.nccl_timeout);
    if (!dist.launched || dist_rank(&dist) == 0) check_outputs(&cfg, encoding);  // rank 0 writes them
    if (!dist.launched && cfg.gpus > 1)
        return launch_local(cfg.gpus, argc, argv, flag_index(argc, argv, "-gpus"), 30.0);
    if (dist.launched && flag_given(argc, argv, "-gpus") && cfg.gpus != dist_world(&dist)) {
        fprintf(stderr, "error: -gpus %d: this process was started by a launcher (%s) as rank %d of %d\n  hint: leave "
                "-gpus out under mpirun, srun or torchrun-style variables; the launcher decides the GPUs\n", cfg.gpus,
                dist.env.source, dist_rank(&dist), dist_world(&dist));
        exit(EXIT_FAILURE);
    }
    if (dist.launched && flag_given(argc, argv, "-device")) {
        fprintf(stderr, "error: -device %d: each rank of a multi-GPU run takes the GPU of its local rank\n  hint: "
                "leave -device out (CUDA_VISIBLE_DEVICES chooses the GPUs)\n", cfg.device);
        exit(EXIT_FAILURE);
    }
    int world = dist_world(&dist), rank = dist_rank(&dist);
    // tokens per step are the same at any number of GPUs: each rank takes 1/world of them
    int total_batch = cfg.total_batch ? cfg.total_batch : cfg.B * cfg.T * world;
    if (total_batch % (cfg.B * cfg.T * world) != 0) {
        fprintf(stderr, "error: -total_batch %d is not a multiple of B*T*GPUs = %d*%d*%d\n  hint: choose -total_batch "
                "(or -b) so that every GPU runs whole micro-batches%s\n", total_batch, cfg.B, cfg.T, world,
                resumed ? "; the value is the resumed run's, kept so that its results do not depend on the GPUs" : "");
        exit(EXIT_FAILURE);
    }
    int accum = total_batch / (cfg.B * cfg.T * world);
    cfg.total_batch = total_batch;  // recorded resolved: a resumed run keeps its batch at any number of GPUs
    char settings[CHECKPOINT_SETTINGS_MAX];
    settings_text(settings, sizeof(settings), &cfg);
    dist_join(&dist, cfg.nccl_init);

    // data first: a bad pattern or too little data fails before the GPU is touched. Shards of either
    // layout load (uint16 ids, or uint32 ids as make_shards --encoding cl100k_base/o200k_base writes);
    // every id is checked against the encoding's vocabulary when a shard is loaded, so a shard of a larger
    // encoding is refused at its first load (at init for the first shard of the stream), naming the file.
    // uint16 shards hold GPT-2's ids (llm.c's layout): refused for the tiktoken encodings.
    DataLoader train, val;
    DataLoaderConfig dc;
    memset(&dc, 0, sizeof(dc));
    dc.pattern = cfg.train_pattern; dc.B = cfg.B; dc.T = cfg.T; dc.shuffle = 1; dc.seed = (uint64_t)cfg.seed;
    dc.vocab_size = encoding->vocab_size; dc.rank = rank; dc.world_size = world;
    dataloader_check(&train, dataloader_init(&train, &dc));
    dc.pattern = cfg.val_pattern; dc.shuffle = 0;
    dataloader_check(&val, dataloader_init(&val, &dc));
    for (int s = 0; s < 2 && strcmp(cfg.encoding, "gpt2") != 0; s++) {
        const DataLoader* d = s == 0 ? &train : &val;
        if (d->token_bytes != 2) continue;
        fprintf(stderr, "error: %s %s: uint16 shards, GPT-2's layout (gpt2 ids), but -encoding is %s\n  hint: make the "
                "shards with build/make_shards --encoding %s (the starter corpus: make data-starter-%s), or pass "
                "-encoding gpt2\n", s == 0 ? "-train" : "-val", d->cfg.pattern, cfg.encoding, cfg.encoding,
                strcmp(cfg.encoding, "o200k_base") == 0 ? "o200k" : "cl100k");
        exit(EXIT_FAILURE);
    }
    int64_t val_avail = val.total_windows / cfg.B;  // batches of the split, over all ranks together
    int val_batches = cfg.val_batches < 0 ? (int)val_avail : cfg.val_batches;
    if (val_avail < 1 || val_batches > val_avail) {
        fprintf(stderr, "error: -val_batches %d: the val split %s holds %lld batches of B*T = %d tokens\n"
                "  hint: use -val_batches %lld or fewer (or -1 for all), or a smaller -b / -t\n", cfg.val_batches,
                cfg.val_pattern, (long long)val_avail, cfg.B * cfg.T, (long long)val_avail);
        exit(EXIT_FAILURE);
    }
    Tokenizer tok;
    if (cfg.sample_tokens > 0) tokenizer_init_encoding(&tok, cfg.encoding, cfg.vocab_path);
    TrainModelConfig mc;
    memset(&mc, 0, sizeof(mc));
    if (is_llama(&cfg)) {
        mc.family = CHECKPOINT_FAMILY_LLAMA;
        llama_config_named(&mc.llama, cfg.size, encoding->vocab_size, LLAMA_MAX_SEQ_LEN);  // a known size: resolve_model
        mc.llama.rope_theta = cfg.rope_theta;
    } else {
        mc.family = CHECKPOINT_FAMILY_GPT2;
        GptConfig* g = &mc.gpt;
        g->max_seq_len = GPT2_MAX_SEQ_LEN; g->vocab_size = encoding->vocab_size; g->padded_vocab_size = GPT2_PADDED_VOCAB;
        g->num_layers = cfg.depth;
        gpt2_size(cfg.depth, &g->channels, &g->num_heads);
    }
    if (resumed) {  // the checkpoint's sizes, checksum and values, before the GPU is touched
        CheckpointModel want = train_model_checkpoint_of(&mc);
        checkpoint_check(ckpt.err, checkpoint_check_model(&ckpt, &want));
        checkpoint_check(ckpt.err, checkpoint_reader_verify(&ckpt));
        if (ckpt.version < CHECKPOINT_VERSION)
            printf("note: %s is a version %d checkpoint, without a checksum: its values were checked, its bytes "
                   "could not be; the checkpoints of this run will have one\n", ckpt_path, ckpt.version);
    }
    float* init_values = cfg.init[0] ? init_read(&init, &mc, &cfg) : NULL;  // -init: read and checked, before the GPU

    GpuContext ctx;
    int device = dist_device(&dist, cfg.device);
    gpu_context_build(&ctx, device);
    ctx.gemm_tune = cfg.gemm_tune;
    dist_connect(&dist, cfg.zero);
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, device));
    const char* peak_source = "";
    double peak = gpu_peak_bf16_flops(device, &peak_source);

    TrainModel model;
    FusedLcePath head = !strcmp(cfg.head, "fused") ? FUSED_LCE_PATH_AUTO : !strcmp(cfg.head, "staged") ? FUSED_LCE_PATH_STAGED
                  : !strcmp(cfg.head, "blocks") ? FUSED_LCE_PATH_BLOCKS : !strcmp(cfg.head, "chunks") ? FUSED_LCE_PATH_CHUNKS
                  : FUSED_LCE_PATH_UNFUSED;
    train_model_build(&model, &mc, cfg.B, cfg.T, cfg.recompute, head, (size_t)cfg.head_scratch << 20, dist_comm(&dist));
    // the sampler's own stream, advanced by every sample and kept in checkpoints
    uint64_t sample_rng = rand_mix((uint64_t)cfg.seed, 0x73616d706c65ULL, 0);
    if (resumed) {
        checkpoint_check(ckpt.err, train_model_load_checkpoint(&model, &ckpt, &ctx));
        checkpoint_reader_close(&ckpt);
        sample_rng = ckpt.state.rng;
        if (train_steps > 0) dataloader_check(&train, dataloader_restore(&train, &ckpt.state.data));
    } else if (cfg.init[0]) {  // init_values: train_model_checkpoint_of's count, the model's (as -resume's)
        train_model_set_params(&model, init_values, &ctx);
        free(init_values);
    } else {
        train_model_init_params(&model, (uint64_t)cfg.seed, &ctx);
    }
    // nothing is written before here: every check has passed and the GPU has started
    // rank 0 alone writes: the others log to /dev/null
    if (rank == 0) checkpoint_check(err, checkpoint_make_dir(cfg.out_dir, err, sizeof(err)));
    // evaluating a checkpoint leaves the log of its run as it is
    FILE* log_file = train_steps == 0 ? NULL : rank == 0 ? log_open(cfg.out_dir, resumed ? start_step : -1, argc, argv)
                   : fopen_check("/dev/null", "w");

    // FLOPs per token: 6 per parameter (forward + backward) plus attention's 6·L·C·T (llm.c's count;
    // the Llama-style model's untied embedding, a lookup, is left out: train_model_flops_per_token)
    double flops_per_token = train_model_flops_per_token(&model, cfg.T);

    const char* rule = "+----------------------+--------------------------------------------------+\n";
    printf("%s", rule);
    table_row("train shards", "%s (%lld tokens, uint%d ids)", cfg.train_pattern, (long long)train.total_windows * cfg.T,
              8 * train.token_bytes);
    table_row("val shards", "%s", cfg.val_pattern);
    const LlamaConfig* lc = &mc.llama;
    if (is_llama(&cfg)) {
        table_row("model", "Llama-style %s: %d layers, %d channels, FFN %d", cfg.size, lc->num_layers, lc->channels,
                  lc->ffn_hidden);
        table_row("attention", "%d heads on %d key/value heads of %d, RoPE theta %g", lc->num_heads, lc->num_kv_heads,
                  lc->channels / lc->num_heads, lc->rope_theta);
        table_row("vocab", "%d (padded to %d), embedding and LM head untied", lc->vocab_size, lc->padded_vocab_size);
        table_row("parameters", "%zu; %zu without the two tables", model.num_params,
                  model.num_params - model.embed_params - model.head_params);
    } else {
        table_row("model", "GPT-2 d%d: %d layers, %d channels, %d heads", cfg.depth, mc.gpt.num_layers, mc.gpt.channels,
                  mc.gpt.num_heads);
        table_row("vocab", "%d (padded to %d)", mc.gpt.vocab_size, mc.gpt.padded_vocab_size);
        table_row("parameters", "%zu", model.num_params);
    }
    table_row("encoding", "%s, <|endoftext|> %d (%s)", cfg.encoding, encoding->eot_id, cfg.vocab_path);
    table_row("batch", "B %d x T %d, %d tokens per step", cfg.B, cfg.T, total_batch);
    table_row("grad accumulation", "%d micro-steps", accum);
    table_row("steps", "%d", cfg.steps);
    table_row("lr schedule", "peak %g, warmup %d, %s to %g x peak", cfg.lr, cfg.warmup, cfg.schedule, cfg.final_lr_frac);
    table_row("AdamW", "beta1 %g, beta2 %g, eps %g, wd %g", cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
    table_row("grad clip", "%g", cfg.clip);
    char head_line[160];
    fused_lce_describe(model.head, head_line, sizeof(head_line));
    table_row("LM head", "%s", head_line);
    table_row("recompute", "%s", cfg.recompute ? "GELU" : "none");
    table_row("validation", "every %d steps, %d batches", cfg.val_every, val_batches);
    table_row("sampling", "%d tokens, every %d steps, temperature %g, top-k %d", cfg.sample_tokens, cfg.sample_every,
              cfg.temperature, cfg.top_k);
    table_row("output", "%s/ (log.txt, checkpoints)", cfg.out_dir);
    if (cfg.keep == 0) table_row("checkpoints", "none (-keep 0)");
    else if (cfg.ckpt_every > 0) table_row("checkpoints", "every %d steps and at the end, keep %d", cfg.ckpt_every, cfg.keep);
    else table_row("checkpoints", "at the end (and on Ctrl-C), keep %d", cfg.keep);
    if (resumed) table_row("resumed from", "%s (step %lld)", ckpt_path, (long long)start_step);
    if (cfg.init[0])
        table_row("initialised from", "%s (optimizer state fresh)", init.llama ? init.lm.w.path : init.gpt.w.path);
    if (cfg.export_hf[0]) table_row("export at the end", "%s/ (Hugging Face transformers)", cfg.export_hf);
    table_row("seed", "%d", cfg.seed);
    table_row("GPU", "%s", prop.name);
    if (dist.launched) {
        table_row("ranks", "%d (%s), %d on this machine, GPU = local rank", world, dist.env.source,
                  dist.env.local_world_size);
        table_row("data parallel", "NCCL, met by %s; %s", cfg.nccl_init,
                  cfg.zero ? "ZeRO-1 optimizer state" : "optimizer state whole on every GPU (-zero 0)");
    }
    if (peak > 0) table_row("peak bf16", "%.1f TFLOP/s (%s) per GPU, the MFU's base", peak / 1e12, peak_source);
    else table_row("peak bf16", "unknown for this architecture: no MFU");
    printf("%s", rule);
    size_t n = model.num_params, shard = model.zero->shard_size;
    char zero_note[96] = "";
    size_t optim_bytes = sizeof(int16_t) + 2 * sizeof(float);  // a parameter's: master (its remainder), m, v
    if (world > 1 && cfg.zero)
        snprintf(zero_note, sizeof(zero_note), " (ZeRO-1: 1/%d of %.1f MiB)", world, mib(n * optim_bytes));
    printf("memory per GPU: parameters %.1f MiB | gradients %.1f MiB | optimizer (master, m, v) %.1f MiB%s | "
           "activations %.1f MiB | head scratch %.1f MiB\n", mib(n * sizeof(bf16)),
           mib(n * sizeof(float)), mib(shard * optim_bytes), zero_note, mib(model.acts_bytes),
           mib(model.head->scratch_bytes + 2 * (size_t)model.head->cfg.max_n * sizeof(float)));

    static Profile prof;  // big (an event per mark): not on the stack
    profile_build(&prof, cfg.profile);
    ctx.prof = &prof;
    double tokens_per_step = (double)total_batch, train_time = 0.0, reduce_ms = 0.0;
    int timed_steps = 0, stopped = 0;
    int64_t end = start_step + train_steps;  // at most -steps: every step of the loop fits an int
    int nan_from, nan_to, bad_run = 0;  // bad_run: steps in a row skipped as non-finite
    test_nan_steps(&nan_from, &nan_to);
    char what[DATALOADER_ERR_LEN + 64], hint[CHECKPOINT_PATH_LEN + 400];
    snprintf(hint, sizeof(hint), "replace the shard with a good copy of the same size, then continue with "
             "./train_gpt -resume latest -out %s (other shards change the data stream, which resuming refuses)",
             cfg.out_dir);
    catch_stop_signals();
    for (int64_t step = start_step; step < end && !stopped; step++) {
        double t0 = dist_now();
        if (step > start_step) profile_start(&prof, ctx.stream);  // the first step includes warmup
        train_model_zero_grad(&model, &ctx);
        DataLoaderPosition step_data = dataloader_save(&train);  // where this step's batches start
        for (int k = 0; k < accum; k++) {
            if (dataloader_next_batch(&train) != 0) {  // a bad shard: keep what was done, name the file
                snprintf(what, sizeof(what), "train data at step %lld: %s", (long long)step + 1, train.err);
                stop_with_checkpoint(&model, &cfg, step, start_step, sample_rng, step_data, settings, log_file, what,
                                     hint, 0, &ctx);
            }
            train_model_forward(&model, train.inputs, cfg.B, cfg.T, &ctx);
            float dloss = 1.0f / (accum * world);  // the mean over every micro-batch of every rank
            train_model_backward(&model, train.targets, dloss, k == accum - 1, &ctx);  // the last: + the ranks' sum
        }
        if (step + 1 >= nan_from && step + 1 <= nan_to)
            cuda_check(cudaMemsetAsync(model.grads, 0xff, sizeof(float), ctx.stream));  // 0xffffffff: NaN
        float lr = lr_at(&cfg, step);
        train_model_update(&model, lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.clip, (int)(step + 1),
                           stop_signal != 0, &ctx);
        float loss, norm[4];  // norm: ‖g‖, clip scale, skipped, stop (llmc/optim/global_norm.cuh)
        cuda_check(cudaMemcpyAsync(&loss, model.loss, sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
        cuda_check(cudaMemcpyAsync(norm, model.norm, sizeof(norm), cudaMemcpyDeviceToHost, ctx.stream));
        comm_sync(model.comm, ctx.stream);
        profile_step_end(&prof);
        if (cfg.profile && step > start_step) reduce_ms += train_model_reduce_ms(&model);
        fused_lce_check(model.head, &ctx);
        double dt = dist_now() - t0;
        if (step > start_step) { train_time += dt; timed_steps++; }  // the first step includes cuBLASLt's warmup
        double tps = tokens_per_step / dt;
        printf("step %5lld/%d | loss %.4f | norm %6.3f | lr %.2e | %7.1f ms | %8.0f tok/s", (long long)step + 1, cfg.steps, loss,
               norm[0], lr, dt * 1e3, tps);
        if (peak > 0) printf(" | MFU %5.1f%%", mfu_percent(tps, flops_per_token, peak, world));
        if (norm[2] != 0.0f) printf(" | SKIPPED: not finite, weights and AdamW state unchanged (%d in a row)", bad_run + 1);
        printf("\n");
        if (norm[2] != 0.0f) {
            fprintf(log_file, "step %lld skipped nonfinite loss %.9g norm %.9g lr %.4e\n", (long long)step + 1, loss,
                    norm[0], lr);
            if (++bad_run >= cfg.max_bad_steps) {
                snprintf(what, sizeof(what), "steps %lld to %lld had a non-finite loss or gradient norm (-max_bad_steps "
                         "%d): each was skipped, so the weights are those of step %lld", (long long)step + 2 - bad_run,
                         (long long)step + 1, cfg.max_bad_steps, (long long)step + 1 - bad_run);
                char advice[CHECKPOINT_PATH_LEN + 200];
                snprintf(advice, sizeof(advice), "lower -lr (now %g) or raise -warmup (now %d), then continue with "
                         "./train_gpt -resume latest -out %s -lr ...", cfg.lr, cfg.warmup, cfg.out_dir);
                stop_with_checkpoint(&model, &cfg, step + 1, start_step, sample_rng, dataloader_save(&train), settings,
                                     log_file, what, advice, 1, &ctx);
            }
        } else {
            bad_run = 0;
            fprintf(log_file, "step %lld train_loss %.9g norm %.9g lr %.4e ms %.1f tok_s %.0f\n", (long long)step + 1, loss, norm[0],
                    lr, dt * 1e3, tps);
        }
        if (step == start_step) {
            size_t free_b, total_b;
            cuda_check(cudaMemGetInfo(&free_b, &total_b));
            printf("memory: %.1f MiB of %.1f MiB in use on the GPU after the first step\n", mib(total_b - free_b),
                   mib(total_b));
        }
        int last = step == end - 1;
        if (last || (cfg.val_every > 0 && (step + 1) % cfg.val_every == 0)) {
            float vl;
            if (evaluate_loss(&model, &val, val_batches, &vl, &ctx) != 0) {
                snprintf(what, sizeof(what), "val data after step %lld: %s", (long long)step + 1, val.err);
                stop_with_checkpoint(&model, &cfg, step + 1, start_step, sample_rng, dataloader_save(&train), settings,
                                     log_file, what, hint, 0, &ctx);
            }
            printf("val loss %.4f (step %lld)\n", vl, (long long)step + 1);
            fprintf(log_file, "step %lld val_loss %.9g\n", (long long)step + 1, vl);
        }
        if (rank == 0 && !last && cfg.sample_tokens > 0 && cfg.sample_every > 0 && (step + 1) % cfg.sample_every == 0)
            evaluate_sample(&model, &tok, cfg.sample_tokens, cfg.temperature, cfg.top_k, &sample_rng,
                            (int)(step + 1), &stop_signal, &ctx);
        stopped = norm[3] != 0.0f;  // a signal reached some rank before this step's update: all stop here
        if (cfg.keep > 0 && (last || stopped || (cfg.ckpt_every > 0 && (step + 1) % cfg.ckpt_every == 0)))
            save_checkpoint(&model, &cfg, step + 1, sample_rng, dataloader_save(&train), settings, log_file, &ctx);
        if (stopped) {
            const char* by = stop_signal == SIGINT ? "Ctrl-C" : stop_signal ? "SIGTERM" : "a signal to another rank";
            printf("stopped by %s after step %lld%s%s\n", by, (long long)step + 1,
                   cfg.keep > 0 ? "; continue with: ./train_gpt -resume latest -out " : " (no checkpoint: -keep 0)",
                   cfg.keep > 0 ? cfg.out_dir : "");
            fprintf(log_file, "step %lld stopped %s\n", (long long)step + 1, stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
        }
    }
    if (timed_steps > 0) {
        double tps = tokens_per_step * timed_steps / train_time;
        printf("average step %.1f ms, %.0f tok/s", 1e3 * train_time / timed_steps, tps);
        if (peak > 0) printf(", MFU %.1f%%", mfu_percent(tps, flops_per_token, peak, world));
        printf(" (steps %lld..%lld)\n", (long long)start_step + 2, (long long)end);
    }
    profile_print(&prof, stdout);
    if (cfg.profile && world > 1 && timed_steps > 0)
        printf("  gradient reduce-scatter%s on its own stream: %.2f ms per step, behind the backward except "
               "\"grad reduce: exposed\"\n", cfg.zero ? "" : " and all-gather (-zero 0)", reduce_ms / timed_steps);
    profile_free(&prof);
    if (train_steps == 0) {  // a checkpoint to evaluate and sample
        float vl;
        dataloader_check(&val, evaluate_loss(&model, &val, val_batches, &vl, &ctx));
        if (cfg.init[0]) printf("val loss %.4f (the weights of -init %s; %.9g)\n", vl, cfg.init, vl);
        else printf("val loss %.4f (checkpoint at step %lld)\n", vl, (long long)start_step);
    }
    if (cfg.export_hf[0]) export_hf(&model, cfg.export_hf, cfg.vocab_path, encoding->eot_id, &ctx);
    if (cfg.sample_tokens > 0) {
        if (!stopped && rank == 0)
            evaluate_sample(&model, &tok, cfg.sample_tokens, cfg.temperature, cfg.top_k, &sample_rng, (int)end, &stop_signal,
                            &ctx);
        tokenizer_free(&tok);
    }
    if (log_file) fclose_check(log_file);
    train_model_free(&model);
    dist_leave(&dist);
    gpu_context_free(&ctx);
    dataloader_free(&val);
    dataloader_free(&train);
    return 0;
}
