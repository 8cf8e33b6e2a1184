// resume.h: host-only. The settings a checkpoint keeps and how -resume applies them: the kept flags
// as text ("-depth 6 -b 32 ..."), written into every checkpoint, and on -resume each one left off the
// command line taken back from it, so that `./train_gpt -resume latest` continues the run as it was
// started; the checkpoint's model family; and the one report of a bad flag value, which says when the
// value came from a checkpoint. Every refusal names the checkpoint's file and exits through
// llmc/core/check.h.
#pragma once
#include <stdio.h>
#include <string.h>
#include "../core/check.h"
#include "../core/flags.h"
#include "../io/checkpoint.h"
#include "train_config.h"

// The flags a checkpoint records. On -resume each one left off the command line is taken from the
// checkpoint. The first eight decide the model and the data stream: given with another value they are
// an error. The others may be changed (a longer -steps, another -lr ...), with a note that the run then
// differs from an uninterrupted one. Each family records its own: -depth for GPT-2 (whose settings are
// what they were before the Llama-style family existed, so its checkpoints are too), -model, -size,
// -encoding and -rope_theta for llama.
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

// "-depth 6 -b 32 ...": the kept flags of c that apply to its family, for a checkpoint. f: the program's
// flag table (nf flags), whose destinations are c's fields.
static void settings_text(char* out, size_t n, const TrainConfig* c, const Flag* f, int nf) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < N_KEPT_FLAGS && len < n; i++) {
        if (!kept_flag_applies(c, kept_flags[i])) continue;
        char v[64];
        flag_format(v, sizeof(v), flag_find(f, nf, kept_flags[i]));
        len += (size_t)snprintf(out + len, n - len, "%s%s %s", len ? " " : "", kept_flags[i], v);
    }
}

// Applies the settings text of checkpoint `path` to c through its flag table f (see kept_flags).
// `text` must outlive c: string flags point into it.
static void settings_resume(TrainConfig* c, const Flag* f, int nf, char* text, const char* path, int argc,
                            char** argv) {
    char* save = NULL;
    for (char* name = strtok_r(text, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        char* value = strtok_r(NULL, " ", &save);
        const Flag* fl = flag_find(f, nf, name);
        int k = 0;
        while (k < N_KEPT_FLAGS && strcmp(kept_flags[k], name) != 0) k++;
        if (!fl || !value || k == N_KEPT_FLAGS || !kept_flag_applies(c, name))
            check_failf("resume it with the train_gpt that wrote it, or start without -resume",
                        "checkpoint %s records %s setting \"%s\"%s: written by another version of train_gpt; start "
                        "without -resume", path, fl && k < N_KEPT_FLAGS ? "the" : "an unknown", name,
                        fl && k < N_KEPT_FLAGS ? (is_llama(c) ? ", which a Llama-style model does not have"
                                                              : ", which a GPT-2 model does not have") : "");
        char hint[CHECKPOINT_PATH_LEN + 160];
        if (!flag_given(argc, argv, name)) {
            char origin[CHECKPOINT_PATH_LEN + 64];
            snprintf(origin, sizeof(origin), " in the settings of the checkpoint %s", path);
            snprintf(hint, sizeof(hint), "pass %s with a valid value to override it, or resume another checkpoint",
                     name);
            flag_set(fl, value, origin, hint);
            continue;
        }
        char now[64];
        flag_format(now, sizeof(now), fl);
        if (strcmp(now, value) == 0 || (strcmp(name, "-steps") == 0 && c->steps == 0)) continue;
        if (k < KEPT_FLAGS_MUST_MATCH) {
            snprintf(hint, sizeof(hint), "leave %s out (it is taken from the checkpoint), or start without -resume",
                     name);
            check_failf(hint, "%s %s: the checkpoint %s was written with %s %s, which must match to resume (it "
                        "decides the model or the data stream)", name, now, path, name, value);
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
    const char* name = model_spec(family)->flag;  // the reader knows the family
    if (!flag_given(argc, argv, "-model")) c->model = name;
    if (strcmp(c->model, name) == 0) return;
    check_failf("leave -model out (it is taken from the checkpoint), or start without -resume",
                "-model %s: the checkpoint %s holds a %s model (-model %s), another model family", c->model, path,
                checkpoint_family_name(family), name);
}

// Exits when `flag` is not NULL: the first bad flag that resolve_model or validate found, msg its
// message. A value taken from the checkpoint's settings (ckpt_path, NULL when not resuming) is said to
// come from there.
static void exit_if_bad(const char* flag, const char* msg, const char* ckpt_path, int argc, char** argv) {
    if (!flag) return;
    int kept = 0;
    for (int k = 0; k < N_KEPT_FLAGS; k++) kept |= strcmp(kept_flags[k], flag) == 0;
    if (ckpt_path && kept && !flag_given(argc, argv, flag)) {
        char hint[160];
        snprintf(hint, sizeof(hint), "pass %s with a valid value to override it, or resume another checkpoint", flag);
        check_failf(hint, "%s\n  the value is from the settings of the checkpoint %s", msg, ckpt_path);
    }
    check_failf("./train_gpt -h lists every flag with what it takes and its default", "%s", msg);
}
