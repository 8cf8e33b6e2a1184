// test_atomic_file.c: llmc/core/atomic_file.h, the temporary file behind every file the program
// writes. Whatever is found at <path>.tmp (a symlink to another file, a dangling symlink, a hard link
// to another file, a stale temporary) is replaced, never written through: the other file keeps its
// bytes, nothing is created where a link points, and <path> ends up a regular file holding exactly
// the new bytes. A directory at <path>.tmp makes the write fail, leaving <path> as it was.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../../llmc/core/atomic_file.h"
#include "../testing.h"

static char dir[] = "/tmp/test_atomic_file.XXXXXX";

static char* in_dir(const char* name) {
    static char buf[8][512];
    static int k = 0;
    char* p = buf[k++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

static void put(const char* path, const char* text) {
    FILE* f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { perror(path); exit(EXIT_FAILURE); }
}

// 1 when path is a regular file (not a link) holding exactly text
static int holds(const char* path, const char* text) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char buf[256] = "";
    FILE* f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f) fclose(f);
    return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static int exists(const char* path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    const char* out = in_dir("out.json");
    const char* tmp = in_dir("out.json.tmp");
    const char* victim = in_dir("victim.txt");
    put(victim, "precious");

    // a symlink planted at the temporary name, pointing at another file
    if (symlink(victim, tmp) != 0) { perror(tmp); return 1; }
    int rc = atomic_write_file(out, "new", 3);
    EXPECT(rc == 0, "write with a symlink at %s: %s", tmp, strerror(errno));
    EXPECT(holds(victim, "precious"), "the file the planted symlink points at was written through");
    EXPECT(holds(out, "new"), "%s is not a regular file holding the new bytes", out);
    EXPECT(!exists(tmp), "the temporary %s was left behind", tmp);

    // a dangling symlink: nothing is created where it points
    const char* target = in_dir("created_through_link");
    if (symlink(target, tmp) != 0) { perror(tmp); return 1; }
    rc = atomic_write_file(out, "newer", 5);
    EXPECT(rc == 0 && holds(out, "newer"), "write with a dangling symlink at the temporary name: rc %d", rc);
    EXPECT(!exists(target), "%s was created through a dangling symlink", target);

    // a hard link to another file: that file is not truncated or written
    if (link(victim, tmp) != 0) { perror(tmp); return 1; }
    rc = atomic_write_file(out, "newest", 6);
    EXPECT(rc == 0 && holds(out, "newest"), "write with a hard link at the temporary name: rc %d", rc);
    EXPECT(holds(victim, "precious"), "the file hard-linked at the temporary name was written through");

    // a stale temporary of a crashed write is replaced
    put(tmp, "stale and longer than the new bytes");
    AtomicFile a;
    rc = atomic_file_open(&a, out);
    EXPECT(rc == 0, "open with a stale temporary: %s", strerror(errno));
    if (rc == 0) {
        fputs("fresh", a.f);
        const char* step = NULL;
        EXPECT(atomic_file_commit(&a, &step) == 0 && holds(out, "fresh"), "commit over a stale temporary: %s",
               step ? step : "");
    }

    // a directory at the temporary name: refused, the final file as it was
    if (mkdir(tmp, 0700) != 0) { perror(tmp); return 1; }
    errno = 0;
    rc = atomic_write_file(out, "lost", 4);
    EXPECT(rc != 0 && errno != 0 && holds(out, "fresh"), "write with a directory at the temporary name: rc %d, errno %d",
           rc, errno);
    rmdir(tmp);
    test_remove_dir(dir);
    return test_summary("test_atomic_file");
}
