// atomic_file.h: files that appear whole or not at all. A file is written under <path>.tmp, flushed
// and fsynced, renamed over <path>, and then its directory is fsynced, so that the rename survives a
// power cut. A write that fails, or a process killed partway, leaves the previous <path> as it was
// (and at most a stale .tmp, which the next write replaces). The temporary file is always a new one:
// whatever is found under <path>.tmp (a stale temporary, a symlink or hard link planted there) is
// unlinked, never followed or truncated, and the file is created with O_CREAT|O_EXCL|O_NOFOLLOW.
// Every file the program writes goes through here: checkpoints and `latest` (checkpoint.h,
// checkpoint_dir.h), safetensors (safetensors.h), the Hugging Face exports' JSON and tokenizer files
// (hf_files.h); token shards (shard.h) open their temporary files with atomic_open_tmp. Host-only,
// plain C.
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ATOMIC_PATH_MAX 4096

typedef struct {
    FILE* f;                         // open for writing on tmp, between atomic_file_open and commit/abort
    char path[ATOMIC_PATH_MAX];      // the final name
    char tmp[ATOMIC_PATH_MAX + 8];   // <path>.tmp, where the bytes go
} AtomicFile;

// fsync of the directory holding `path`, so that a rename in it survives a power cut. -1 with errno.
static inline int atomic_sync_dir_of(const char* path) {
    char dir[ATOMIC_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0'; else snprintf(dir, sizeof(dir), ".");
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

// Creates the file `tmp` afresh and opens it for writing. An entry already there is unlinked first (a
// link is removed, not followed: the file it names keeps its bytes), then the file is created with
// O_CREAT|O_EXCL|O_NOFOLLOW, so the bytes written go only into a file this call made. NULL with errno
// (EISDIR for a directory there, EEXIST when something reappears there each time).
static inline FILE* atomic_open_tmp(const char* tmp) {
    for (int tries = 0; tries < 3; tries++) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0) {
            FILE* f = fdopen(fd, "wb");
            if (!f) {
                int saved = errno;
                close(fd);
                unlink(tmp);
                errno = saved;
            }
            return f;
        }
        if (errno != EEXIST) return NULL;
        if (unlink(tmp) != 0 && errno != ENOENT) return NULL;
    }
    errno = EEXIST;
    return NULL;
}

// Opens <path>.tmp for writing. -1 with errno (ENAMETOOLONG when the path does not fit; a->f NULL).
static inline int atomic_file_open(AtomicFile* a, const char* path) {
    a->f = NULL;
    if (strlen(path) + 1 > sizeof(a->path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(a->path, sizeof(a->path), "%s", path);
    snprintf(a->tmp, sizeof(a->tmp), "%s.tmp", path);
    a->f = atomic_open_tmp(a->tmp);
    return a->f ? 0 : -1;
}

// Gives up the write: the temporary file is closed and removed, nothing appears under the final name.
static inline void atomic_file_abort(AtomicFile* a) {
    int saved = errno;  // the caller reports the error that made it give up, not one of the clean-up's
    if (a->f) fclose(a->f);
    a->f = NULL;
    remove(a->tmp);
    errno = saved;
}

// Flush, fsync, close, rename over the final name, fsync the directory. On failure: -1 with errno, *step
// (if not NULL) naming what failed, and the temporary file removed.
static inline int atomic_file_commit(AtomicFile* a, const char** step) {
    const char* what = NULL;
    if (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0) what = "flush and fsync";
    FILE* f = a->f;
    a->f = NULL;
    if (fclose(f) != 0 && !what) what = "fclose";
    if (!what && rename(a->tmp, a->path) != 0) what = "rename of the temporary file";
    if (!what && atomic_sync_dir_of(a->path) != 0) what = "fsync of the directory";
    if (step) *step = what;
    if (!what) return 0;
    atomic_file_abort(a);
    return -1;
}

// A whole small file: len bytes of data to path. -1 with errno.
static inline int atomic_write_file(const char* path, const void* data, size_t len) {
    AtomicFile a;
    if (atomic_file_open(&a, path) != 0) return -1;
    if (len > 0 && fwrite(data, 1, len, a.f) != len) {
        atomic_file_abort(&a);
        return -1;
    }
    return atomic_file_commit(&a, NULL);
}
