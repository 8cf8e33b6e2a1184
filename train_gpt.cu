// train_gpt.cu: pretrains a GPT-2 (d6 ... d48) or a Llama-style model (llama-30m ... llama-1b) from
// scratch on token shards, in bf16, on one GPU or on many through NCCL (-gpus N, mpirun, srun or
// torchrun-style variables; doc/multi_gpu.md).
//   make train_gpt && ./train_gpt            (d6 on the starter shards: a few minutes, visibly learns)
//   ./train_gpt -model llama                 (llama-30m on the starter shards in o200k_base)
//   ./train_gpt -h                           (every flag with its default)
// The model and its layers are in llmc/ (llmc/model/spec.h says what each family is, model.cuh wires
// either); this file is the algorithm around it: the flag table, then main's flow (flags, data, model,
// the loop with gradient accumulation: step, validation, samples, checkpoints; then the export), its
// progress line and its config table. What the flow calls is in llmc/train/: train_config.h (the
// settings: the family resolved, every value checked, the LR schedule), resume.h (the settings kept in
// checkpoints: bitwise-identical resume), run.cuh (the log, checkpoints, faults and Ctrl-C, which writes
// one and exits cleanly, and -export_hf: llmc/io/hf_model.h, doc/interop.md) and evaluate.cuh (the val
// loss and samples); -init starts from weights in Hugging Face's layout (llmc/io/hf_init.h).
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/train/run.cuh"              // the run's outputs and stops: -out and -export_hf checked, log, checkpoints, signals, export
#include "llmc/train/resume.h"             // the settings kept in checkpoints, and how -resume applies them
#include "llmc/train/train_config.h"       // TrainConfig: the family's flags resolved, every value checked, the LR schedule
#include "llmc/io/model_checkpoint.cuh"    // Model: GPT-2 or Llama-style, build / step / free, checkpoint, export
#include "llmc/io/hf_init.h"               // -init: weights in Hugging Face's layout, opened and checked before the GPU
#include "llmc/core/flags.h"               // the flag table's parser
#include "llmc/data/dataloader.h"          // DataLoader: (B, T) batches from shards
#include "llmc/data/tokenizer_tiktoken.h"  // the encodings (gpt2, cl100k_base, o200k_base): ids and decoding, for samples
#include "llmc/train/evaluate.cuh"         // the val loss, and text samples (llmc/model/sample.h draws the tokens)
#include "llmc/io/checkpoint_dir.h"        // the run's checkpoint directory: names, latest, -resume, keep K
#include "llmc/dist/dist.cuh"              // data-parallel runs: launch environment, rendezvous, NCCL (doc/multi_gpu.md)
#include "llmc/dist/launcher.h"            // -gpus N: one process per GPU of this machine
#include "llmc/dist/dist_socket.h"         // dist_now: the monotonic clock of the timings
#include "llmc/core/gpu_peak.h"            // the GPU's peak bf16 FLOP/s and the MFU

// config.json says which epsilon the exported model's LayerNorms use: it must be the one we compute with
static_assert(LN_EPS == (float)GPT_HF_LN_EPS, "llmc/io/hf_model.h's GPT_HF_LN_EPS must equal llmc/layers/layernorm.cuh's LN_EPS");

// --- flags ---------------------------------------------------------------------------------------

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

// Sets c from the defaults and argv through the table f (kept: a checkpoint's settings are read and
// written through it); -h prints the usage and exits 0, the one exit of a run that is not an error.
static int parse_flags(TrainConfig* c, Flag* f, int argc, char** argv) {
    int n = train_flags(c, f);
    if (flags_parse(f, n, argc, argv)) { usage(f, n); exit(EXIT_SUCCESS); }
    return n;
}

// --- the config table ---------------------------------------------------------------------------

// One row of the config table: the value is formatted, then padded to the column.
static void table_row(const char* name, const char* fmt, ...) {
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    printf("| %-20s | %-48s |\n", name, value);
}

// --- signals ------------------------------------------------------------------------------------

// Ctrl-C or SIGTERM (llmc/train/run.cuh's catch_stop_signals): the loop finishes its step, writes a
// checkpoint and exits. The handler reaches nothing but a global, so the flag is the program's.
static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int sig) { stop_signal = sig; }

// --- main ----------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    TrainConfig cfg;
    Flag flags[MAX_FLAGS];
    int nflags = parse_flags(&cfg, flags, argc, argv);
    // -resume: the checkpoint's header and settings first, so that flags left out come from it
    CheckpointReader ckpt;
    char ckpt_path[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN], saved_settings[CHECKPOINT_SETTINGS_MAX];
    int resumed = cfg.resume[0] != '\0';
    if (resumed && cfg.init[0])
        check_failf("leave -init out to continue the run, or -resume out to start one from the weights",
                    "-resume %s -init %s: -resume continues a run, -init starts one from weights; give one", cfg.resume,
                    cfg.init);
    // -init: the file's family, and a Llama model's sizes and encoding, before the flags that depend on them
    InitFile init;
    memset(&init, 0, sizeof(init));
    if (cfg.init[0]) hf_init_refuse_checkpoint(cfg.init);
    // -model left out: the -init file's family (a Llama model's tensors are named model.embed_tokens ...)
    if (cfg.init[0] && !flag_given(argc, argv, "-model") && llama_hf_detect(cfg.init)) cfg.model = "llama";
    if (cfg.init[0] && is_llama(&cfg)) {
        init.llama = 1;
        hf_init_open_llama(&init.lm, cfg.init, &cfg.size, &cfg.encoding, &cfg.rope_theta,
                           flag_given(argc, argv, "-size"), flag_given(argc, argv, "-rope_theta"));
    }
    if (resumed) {
        checkpoint_check(err, checkpoint_resolve(ckpt_path, sizeof(ckpt_path), cfg.resume, cfg.out_dir, err, sizeof(err)));
        checkpoint_check(ckpt.err, checkpoint_reader_open(&ckpt, ckpt_path));
        model_from_checkpoint(&cfg, &ckpt, ckpt_path, argc, argv);
        memcpy(saved_settings, ckpt.state.settings, sizeof(saved_settings));
        settings_resume(&cfg, flags, nflags, saved_settings, ckpt_path, argc, argv);
    }
    char msg[512];
    exit_if_bad(resolve_model(&cfg, argc, argv, msg, sizeof(msg)), msg, resumed ? ckpt_path : NULL, argc, argv);
    const TokenizerEncoding* encoding = tokenizer_find_encoding(cfg.encoding);
    // -init of GPT-2: the file's header first, so that a bad file fails before the GPU is touched and the
    // depth can come from its tensors
    if (cfg.init[0] && !init.llama) hf_init_open_gpt(&init.gpt, cfg.init, &cfg.depth, flag_given(argc, argv, "-depth"));
    exit_if_bad(validate(&cfg, msg, sizeof(msg)), msg, resumed ? ckpt_path : NULL, argc, argv);
    // the checkpoint's step is in [0, CHECKPOINT_MAX_STEP] (its reader checks): kept 64-bit, as it is stored
    int64_t start_step = resumed ? ckpt.state.step : 0;
    int64_t train_steps = cfg.steps == 0 ? 0 : cfg.steps - start_step;  // 0: evaluate and sample only
    if (train_steps < 0)
        check_failf("pass a larger -steps to continue training, or -steps 0 to only evaluate and sample it",
                    "-steps %d: the checkpoint %s is at step %lld already", cfg.steps, ckpt_path, (long long)start_step);

    // -gpus N: this process becomes the launcher of N ranks, each this program without the flag
    DistRun dist;
    dist_detect(&dist, cfg.nccl_timeout);
    if (!dist.launched || dist_rank(&dist) == 0) check_outputs(&cfg, encoding);  // rank 0 writes them
    if (!dist.launched && cfg.gpus > 1)
        return launch_local(cfg.gpus, argc, argv, flag_index(argc, argv, "-gpus"), 30.0);
    if (dist.launched && flag_given(argc, argv, "-gpus") && cfg.gpus != dist_world(&dist))
        check_failf("leave -gpus out under mpirun, srun or torchrun-style variables; the launcher decides the GPUs",
                    "-gpus %d: this process was started by a launcher (%s) as rank %d of %d", cfg.gpus,
                    dist.env.source, dist_rank(&dist), dist_world(&dist));
    if (dist.launched && flag_given(argc, argv, "-device"))
        check_failf("leave -device out (CUDA_VISIBLE_DEVICES chooses the GPUs)",
                    "-device %d: each rank of a multi-GPU run takes the GPU of its local rank", cfg.device);
    int world = dist_world(&dist), rank = dist_rank(&dist);
    // tokens per step are the same at any number of GPUs: each rank takes 1/world of them
    int total_batch = cfg.total_batch ? cfg.total_batch : cfg.B * cfg.T * world;
    if (total_batch % (cfg.B * cfg.T * world) != 0)
        check_failf(resumed ? "choose -total_batch (or -b) so that every GPU runs whole micro-batches; the value is the "
                              "resumed run's, kept so that its results do not depend on the GPUs"
                            : "choose -total_batch (or -b) so that every GPU runs whole micro-batches",
                    "-total_batch %d is not a multiple of B*T*GPUs = %d*%d*%d", total_batch, cfg.B, cfg.T, world);
    int accum = total_batch / (cfg.B * cfg.T * world);
    cfg.total_batch = total_batch;  // recorded resolved: a resumed run keeps its batch at any number of GPUs
    char settings[CHECKPOINT_SETTINGS_MAX];
    settings_text(settings, sizeof(settings), &cfg, flags, nflags);
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
        char hint[160];
        snprintf(hint, sizeof(hint), "make the shards with build/make_shards --encoding %s (the starter corpus: make "
                 "data-starter-%s), or pass -encoding gpt2", cfg.encoding,
                 strcmp(cfg.encoding, "o200k_base") == 0 ? "o200k" : "cl100k");
        check_failf(hint, "%s %s: uint16 shards, GPT-2's layout (gpt2 ids), but -encoding is %s",
                    s == 0 ? "-train" : "-val", d->cfg.pattern, cfg.encoding);
    }
    int64_t val_avail = val.total_windows / cfg.B;  // batches of the split, over all ranks together
    int val_batches = cfg.val_batches < 0 ? (int)val_avail : cfg.val_batches;
    if (val_avail < 1 || val_batches > val_avail) {
        char hint[128];
        snprintf(hint, sizeof(hint), "use -val_batches %lld or fewer (or -1 for all), or a smaller -b / -t",
                 (long long)val_avail);
        check_failf(hint, "-val_batches %d: the val split %s holds %lld batches of B*T = %d tokens", cfg.val_batches,
                    cfg.val_pattern, (long long)val_avail, cfg.B * cfg.T);
    }
    Tokenizer tok;
    if (cfg.sample_tokens > 0) tokenizer_init_encoding(&tok, cfg.encoding, cfg.vocab_path);
    ModelConfig mc;
    train_model_config(&mc, &cfg, encoding->vocab_size);
    if (resumed) {  // the checkpoint's sizes, checksum and values, before the GPU is touched
        CheckpointModel want = checkpoint_model_of(&mc);
        checkpoint_check(ckpt.err, checkpoint_check_model(&ckpt, &want));
        checkpoint_check(ckpt.err, checkpoint_reader_verify(&ckpt));
        if (ckpt.version < CHECKPOINT_VERSION)
            printf("note: %s is a version %d checkpoint, without a checksum: its values were checked, its bytes "
                   "could not be; the checkpoints of this run will have one\n", ckpt_path, ckpt.version);
    }
    float* init_values = cfg.init[0] ? hf_init_read(&init, &mc, cfg.init) : NULL;  // -init: read and checked, before the GPU

    GpuContext ctx;
    int device = dist_device(&dist, cfg.device);
    gpu_context_build(&ctx, device);
    ctx.gemm_tune = cfg.gemm_tune;
    dist_connect(&dist, cfg.zero);
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, device));
    const char* peak_source = "";
    double peak = gpu_peak_bf16_flops(device, &peak_source);

    Model model;
    FusedLcePath head = !strcmp(cfg.head, "fused")    ? FUSED_LCE_PATH_AUTO
                      : !strcmp(cfg.head, "staged") ? FUSED_LCE_PATH_STAGED
                      : !strcmp(cfg.head, "blocks") ? FUSED_LCE_PATH_BLOCKS
                      : !strcmp(cfg.head, "chunks") ? FUSED_LCE_PATH_CHUNKS
                                                    : FUSED_LCE_PATH_UNFUSED;
    model_build(&model, &mc, cfg.B, cfg.T, cfg.recompute, head, (size_t)cfg.head_scratch << 20, dist_comm(&dist));
    // the sampler's own stream, advanced by every sample and kept in checkpoints
    uint64_t sample_rng = rand_mix((uint64_t)cfg.seed, 0x73616d706c65ULL, 0);
    if (resumed) {
        checkpoint_check(ckpt.err, model_load_checkpoint(&model, &ckpt, &ctx));
        checkpoint_reader_close(&ckpt);
        sample_rng = ckpt.state.rng;
        if (train_steps > 0) dataloader_check(&train, dataloader_restore(&train, &ckpt.state.data));
    } else if (cfg.init[0]) {  // init_values: model_num_params(&mc), the model's (as -resume's)
        model_set_params(&model, init_values, &ctx);
        free(init_values);
    } else {
        model_init_params(&model, (uint64_t)cfg.seed, &ctx);
    }
    // nothing is written before here: every check has passed and the GPU has started
    // rank 0 alone writes: the others log to /dev/null
    if (rank == 0) checkpoint_check(err, checkpoint_make_dir(cfg.out_dir, err, sizeof(err)));
    // evaluating a checkpoint leaves the log of its run as it is
    FILE* log_file = train_steps == 0 ? NULL : rank == 0 ? log_open(cfg.out_dir, resumed ? start_step : -1, argc, argv)
                   : fopen_check("/dev/null", "w");

    // FLOPs per token: 6 per parameter (forward + backward) plus attention's 6·L·C·T (llm.c's count;
    // the Llama-style model's untied embedding, a lookup, is left out: model_flops_per_token)
    double flops_per_token = model_flops_per_token(&model, cfg.T);

    const char* rule = "+----------------------+--------------------------------------------------+\n";
    printf("%s", rule);
    table_row("train shards", "%s (%lld tokens, uint%d ids)", cfg.train_pattern, (long long)train.total_windows * cfg.T,
              8 * train.token_bytes);
    table_row("val shards", "%s", cfg.val_pattern);
    const ModelConfig* lc = &mc;
    if (is_llama(&cfg)) {
        table_row("model", "Llama-style %s: %d layers, %d channels, FFN %d", cfg.size, lc->num_layers, lc->channels,
                  lc->ffn_hidden);
        table_row("attention", "%d heads on %d key/value heads of %d, RoPE theta %g", lc->num_heads, lc->num_kv_heads,
                  lc->channels / lc->num_heads, lc->rope_theta);
        table_row("vocab", "%d (padded to %d), embedding and LM head untied", lc->vocab_size, lc->padded_vocab_size);
        table_row("parameters", "%zu; %zu without the two tables", model.num_params,
                  model.num_params - model_embed_params(&model) - model_head_params(&model));
    } else {
        table_row("model", "GPT-2 d%d: %d layers, %d channels, %d heads", cfg.depth, mc.num_layers, mc.channels,
                  mc.num_heads);
        table_row("vocab", "%d (padded to %d)", mc.vocab_size, mc.padded_vocab_size);
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
    fused_lce_describe(&model.head, head_line, sizeof(head_line));
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
    size_t n = model.num_params, shard = model.zero.shard_size;
    char zero_note[96] = "";
    size_t optim_bytes = sizeof(int16_t) + 2 * sizeof(float);  // a parameter's: master (its remainder), m, v
    if (world > 1 && cfg.zero)
        snprintf(zero_note, sizeof(zero_note), " (ZeRO-1: 1/%d of %.1f MiB)", world, mib(n * optim_bytes));
    printf("memory per GPU: parameters %.1f MiB | gradients %.1f MiB | optimizer (master, m, v) %.1f MiB%s | "
           "activations %.1f MiB | head scratch %.1f MiB\n", mib(n * sizeof(bf16)),
           mib(n * sizeof(float)), mib(shard * optim_bytes), zero_note, mib(model.acts_bytes),
           mib(fused_lce_memory_bytes(&model.head)));

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
    catch_stop_signals(on_stop_signal);
    for (int64_t step = start_step; step < end && !stopped; step++) {
        double t0 = dist_now();
        if (step > start_step) profile_start(&prof, ctx.stream);  // the first step includes warmup
        model_zero_grad(&model, &ctx);
        DataLoaderPosition step_data = dataloader_save(&train);  // where this step's batches start
        for (int k = 0; k < accum; k++) {
            if (dataloader_next_batch(&train) != 0) {  // a bad shard: keep what was done, name the file
                snprintf(what, sizeof(what), "train data at step %lld: %s", (long long)step + 1, train.err);
                stop_with_checkpoint(&model, &cfg, step, start_step, sample_rng, step_data, settings, log_file, what,
                                     hint, 0, &ctx);
            }
            model_forward(&model, train.inputs, cfg.B, cfg.T, &ctx);
            float dloss = 1.0f / (accum * world);  // the mean over every micro-batch of every rank
            if (k == accum - 1) model_backward_reduce(&model, train.targets, dloss, &ctx);  // the last: + the ranks' sum
            else model_backward(&model, train.targets, dloss, &ctx);
        }
        if (step + 1 >= nan_from && step + 1 <= nan_to)
            cuda_check(cudaMemsetAsync(model.grads_memory, 0xff, sizeof(float), ctx.stream));  // 0xffffffff: NaN
        float lr = lr_at(&cfg, step);
        model_update(&model, lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.clip, (int)(step + 1),
                           stop_signal != 0, &ctx);
        float loss, norm[4];  // norm: ‖g‖, clip scale, skipped, stop (llmc/optim/global_norm.cuh)
        cuda_check(cudaMemcpyAsync(&loss, model.acts.loss, sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
        cuda_check(cudaMemcpyAsync(norm, model.acts.norm, sizeof(norm), cudaMemcpyDeviceToHost, ctx.stream));
        comm_sync(model.comm, ctx.stream);
        profile_step_end(&prof);
        if (cfg.profile && step > start_step) reduce_ms += model_grad_reduce_ms(&model);
        fused_lce_check(&model.head, &ctx);
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
    model_free(&model);
    dist_leave(&dist);
    gpu_context_free(&ctx);
    dataloader_free(&val);
    dataloader_free(&train);
    return 0;
}
