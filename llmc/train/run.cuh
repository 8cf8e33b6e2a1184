// run.cuh: the run around train_gpt's loop: its outputs and its stops. -out and -export_hf are checked
// at start-up, before any training they would lose; the log (<out>/log.txt) is opened, kept whole
// across a resume; checkpoints are saved with the `latest` marker and the older ones pruned; a fault
// the run cannot go on from (a bad shard, too many non-finite steps) stops it with a checkpoint and
// what to do; Ctrl-C and SIGTERM are caught so that the loop stops after its step; the model is
// exported at the end for Hugging Face transformers. Every error exits through llmc/core/check.h.
#pragma once
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../core/check.h"
#include "../dist/dist_socket.h"  // dist_now: the monotonic clock of the timings
#include "../io/checkpoint_dir.h"
#include "../io/model_checkpoint.cuh"
#include "train_config.h"

static double mib(size_t bytes) { return bytes / 1048576.0; }

// The run's outputs, checked at start-up, before any training it would lose: -out must be a directory
// this process can create or write in (llmc/io/checkpoint_dir.h), and -export_hf's directory one that
// an export can be written to (llmc/io/hf_files.h: absent, empty or an earlier export; GPT-2's also
// needs its tokenizer files), not -out itself. Nothing is created. Exits naming the flag.
static void check_outputs(const TrainConfig* c, const TokenizerEncoding* enc) {
    char err[HF_ERR_LEN];
    if (checkpoint_check_dir(c->out_dir, err, sizeof(err)) != 0)
        check_failf("pass -out a directory you can write to", "-out %s: %s", c->out_dir, err);
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
        ModelConfig g;
        memset(&g, 0, sizeof(g));
        g.family = MODEL_FAMILY_GPT2;
        g.vocab_size = enc->vocab_size;
        rc = hf_model_export_check(c->export_hf, &g, c->vocab_path, err, sizeof(err));
    }
    if (rc != 0)
        check_failf("the export is written when the run ends; pass -export_hf a new directory (or an earlier "
                    "export's)", "-export_hf %s: %s", c->export_hf, err);
}

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
    if (rename(tmp, path) != 0)
        check_failf("is the disk full, or -out's directory read-only?", "%s: %s", path, strerror(errno));
    FILE* f = fopen_check(path, "ab");
    setvbuf(f, NULL, _IOLBF, 0);  // whole lines reach the file as they are written
    return f;
}

// The checkpoint after `step` steps: the file, then the `latest` marker, then older ones pruned. Every
// rank calls it (the state is gathered from their shards); rank 0 writes.
static void save_checkpoint(Model* m, const TrainConfig* c, int64_t step, uint64_t sample_rng,
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
    checkpoint_check(err, model_save_checkpoint(m, path, &s, err, sizeof(err), ctx));  // every rank: it gathers
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
static void stop_with_checkpoint(Model* m, const TrainConfig* c, int64_t step, int64_t start_step, uint64_t sample_rng,
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
    check_failf(hint, "%s\n  %s", what, done);
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

// Ctrl-C or SIGTERM: the loop finishes its step, writes a checkpoint and exits. on_signal records the
// signal in the program's one flag (a handler reaches nothing but a global, which llmc/ does not keep).
// SA_RESETHAND: a second Ctrl-C kills at once (a checkpoint being written then is left as a .tmp file,
// never under its name).
static void catch_stop_signals(void (*on_signal)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// The model's fp32 master weights to dir, through the export tool's code (GPT-2: build/export_hf).
// Every rank calls it (the weights are gathered from their shards); rank 0 writes.
static void export_hf(Model* m, const char* dir, const char* vocab_path, int eot, const GpuContext* ctx) {
    char err[HF_ERR_LEN];
    double t0 = dist_now();
    if (model_export_hf(m, dir, vocab_path, eot, err, sizeof(err), ctx) != 0)
        check_failf("check the directory and the disk; with -keep above 0, build/export_hf exports the last "
                    "checkpoint", "-export_hf %s: %s", dir, err);
    if (m->comm->rank == 0)
        printf("exported to %s/ for Hugging Face transformers (%s, fp32 master weights, %.1f MiB, %.1f s)\n", dir,
               m->spec->family == MODEL_FAMILY_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM",
               mib(m->num_params * sizeof(float)), dist_now() - t0);
}
