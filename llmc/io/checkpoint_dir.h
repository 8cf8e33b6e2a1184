// checkpoint_dir.h: host-only. The checkpoint directory of a run: file names ckpt_<step, 8 digits>.bin,
// the `latest` marker (the newest complete checkpoint's file name, one line, replaced atomically after
// the checkpoint itself is complete), resolving what -resume names, and deleting all but the last K.
// The file format and its writer and reader are llmc/io/checkpoint.h. Errors as there: 0, or -1 with a
// message in `err` naming the file and what to do.
#pragma once
#include <dirent.h>
#include "checkpoint.h"

// <dir>/ckpt_<step>.bin
static inline void checkpoint_path(char* out, size_t n, const char* dir, int64_t step) {
    snprintf(out, n, "%s/ckpt_%08lld.bin", dir, (long long)step);
}

// The step of a file named ckpt_<digits>.bin, or -1 for any other name.
static inline int64_t checkpoint_step_of_name(const char* name) {
    size_t len = strlen(name);
    if (len < 10 || strncmp(name, "ckpt_", 5) != 0 || strcmp(name + len - 4, ".bin") != 0) return -1;
    int64_t step = 0;
    for (size_t i = 5; i < len - 4; i++) {
        if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

// mkdir -p: creates dir and its missing parents.
static inline int checkpoint_make_dir(const char* dir, char* err, size_t errlen) {
    char p[CHECKPOINT_PATH_LEN];
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p)) { snprintf(err, errlen, "-out path too long: %s", dir); return -1; }
    for (char* s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            struct stat st;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create the output directory %s: %s; pick another one with -out", p, strerror(errno));
                return -1;
            }
            if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s exists and is not a directory; pick another output directory with -out", p);
                return -1;
            }
            *s = c;
            if (c == '\0') break;
        }
    }
    return 0;
}

// Whether checkpoint_make_dir(dir) would succeed, without creating anything: dir is a directory this
// process may write in, or is absent and its nearest existing ancestor is one. How the trainer checks
// -out at start-up, before any work it would lose.
static inline int checkpoint_check_dir(const char* dir, char* err, size_t errlen) {
    char p[CHECKPOINT_PATH_LEN];
    if (!dir[0] || snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p)) {
        snprintf(err, errlen, "an empty or too long path");
        return -1;
    }
    struct stat st;
    for (;;) {  // p: dir, then its parents, until one exists
        if (stat(p, &st) == 0) break;
        if (errno != ENOENT && errno != ENOTDIR) {
            snprintf(err, errlen, "cannot create %.1500s: %.1500s: %s", dir, p, strerror(errno));
            return -1;
        }
        char* slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == '\0') {  // a trailing slash: the name before it
            *slash = '\0';
            slash = strrchr(p, '/');
        }
        if (!slash) snprintf(p, sizeof(p), ".");
        else if (slash == p) p[1] = '\0';
        else *slash = '\0';
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%.1500s exists and is not a directory", p);
        return -1;
    }
    if (access(p, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "cannot write in %.1500s: %s", p, strerror(errno));
        return -1;
    }
    return 0;
}

// Replaces <dir>/latest with one line naming `file` (a checkpoint in dir), atomically (atomic_file.h).
static inline int checkpoint_mark_latest(const char* dir, const char* file, char* err, size_t errlen) {
    char path[CHECKPOINT_PATH_LEN], line[CHECKPOINT_PATH_LEN + 2];
    snprintf(path, sizeof(path), "%s/latest", dir);
    const char* base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(line, sizeof(line), "%s\n", base);
    if (atomic_write_file(path, line, (size_t)n) != 0) {
        snprintf(err, errlen, "cannot write %s: %s; is the disk full or the output directory read-only?", path, strerror(errno));
        return -1;
    }
    return 0;
}

// The checkpoint that -resume names: "latest" (the one <out_dir>/latest names), a directory (the one its
// `latest` names), or a checkpoint file.
static inline int checkpoint_resolve(char* path, size_t n, const char* arg, const char* out_dir, char* err, size_t errlen) {
    struct stat st;
    const char* dir = strcmp(arg, "latest") == 0 ? out_dir : (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) ? arg : NULL;
    if (!dir) { snprintf(path, n, "%s", arg); return 0; }
    char marker[CHECKPOINT_PATH_LEN + 8], name[256];
    snprintf(marker, sizeof(marker), "%s/latest", dir);
    FILE* f = fopen(marker, "rb");
    if (!f) {
        snprintf(err, errlen, "-resume %s: cannot open %s (%s): no checkpoint was completed in %s; pass a checkpoint "
                 "file, the -out directory of the run to resume, or start without -resume", arg, marker, strerror(errno), dir);
        return -1;
    }
    int ok = fgets(name, sizeof(name), f) != NULL;
    fclose(f);
    if (ok) name[strcspn(name, "\r\n")] = '\0';
    if (!ok || checkpoint_step_of_name(name) < 0) {
        snprintf(err, errlen, "-resume %s: %s does not name a checkpoint (ckpt_<step>.bin); pass a checkpoint file instead",
                 arg, marker);
        return -1;
    }
    snprintf(path, n, "%s/%s", dir, name);
    return 0;
}

typedef struct {
    int64_t step;
    char name[256];
} CheckpointEntry;

static inline int checkpoint_compare_entries(const void* a, const void* b) {
    int64_t x = ((const CheckpointEntry*)a)->step, y = ((const CheckpointEntry*)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;  // newest first
}

// After the checkpoint of `step` is complete: keeps it and the keep-1 newest older ones of dir, deletes
// the other older ones. Newer ones (of a run resumed from an earlier checkpoint) are left alone.
static inline int checkpoint_prune(const char* dir, int keep, int64_t step, char* err, size_t errlen) {
    DIR* d = opendir(dir);
    if (!d) { snprintf(err, errlen, "cannot list %s: %s", dir, strerror(errno)); return -1; }
    CheckpointEntry* older = NULL;
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int64_t s = checkpoint_step_of_name(e->d_name);
        if (s < 0 || s >= step || strlen(e->d_name) >= sizeof(older[0].name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            older = (CheckpointEntry*)realloc_check(older, (size_t)cap * sizeof(CheckpointEntry));
        }
        older[n].step = s;
        snprintf(older[n].name, sizeof(older[n].name), "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1) qsort(older, (size_t)n, sizeof(CheckpointEntry), checkpoint_compare_entries);
    int rc = 0;
    for (int i = keep - 1 < 0 ? 0 : keep - 1; i < n; i++) {
        char path[CHECKPOINT_PATH_LEN + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, older[i].name);
        if (remove(path) != 0 && rc == 0) {
            snprintf(err, errlen, "cannot delete the old checkpoint %s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    free(older);
    return rc;
}

