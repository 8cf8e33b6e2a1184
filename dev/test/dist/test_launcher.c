// test_launcher.c: CPU tests of `-gpus N` (llmc/dist/launcher.h). The test launches itself: with RANK and
// TEST_LAUNCH_DIR set it is a rank (it writes what it saw to TEST_LAUNCH_DIR and does what
// TEST_LAUNCH_MODE says), otherwise it runs launch_local in a forked launcher whose stderr goes to a file.
// Checks:
//   every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and one free
//   MASTER_PORT, whatever this process had for them; NCCL_* and other variables as they were; the
//   arguments without "-gpus N" (also with -gpus first or last); all exit 0: the launcher returns 0
//   and prints nothing;
//   one rank exits 3 while the others sleep: the launcher returns 1 after the grace period (not
//   before), having SIGKILLed the others, with one line per rank ("rank 1 exited with status 3",
//   "rank 0 killed by signal 9 (SIGKILL)");
//   one rank dies of a signal and the others finish within the grace period: only the dead one is
//   reported ("killed by signal 10 (SIGUSR1)"), and the others are not killed;
//   SIGTERM and SIGINT to the launcher reach every rank as SIGTERM (each exits 0 after it: return 0);
//   the launcher SIGKILLed: every rank gets SIGTERM (PR_SET_PDEATHSIG);
//   with the control channel (llmc/dist/dist_control.h) in the ranks: they find each other from the
//   launcher's variables; one rank failing makes the others exit with its message well within the
//   grace period (nobody is SIGKILLed), and the launcher returns 1;
//   bad arguments (N < 1, no N after -gpus) are refused with a message.
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../../llmc/dist/dist_control.h"
#include "../../../llmc/dist/launcher.h"
#include "../testing.h"

static char tmp_dir[256];

static int exists(const char* path) { return access(path, F_OK) == 0; }

static void touch(const char* dir, const char* what, const char* rank) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s_%s", dir, what, rank);
    FILE* f = fopen(path, "w");
    if (f) fclose(f);
}

static volatile sig_atomic_t got_term = 0;
static void on_term(int sig) { (void)sig; got_term = 1; }

// --- the rank's side ------------------------------------------------------------------------------

// A rank as the trainer would be one: its place from the environment, the control channel, the blob;
// the failing rank exits with an error while the others wait as if inside a collective.
static int rank_with_control(int is_failing, int someone_fails) {
    DistEnv e;
    DistControl c;
    char err[DIST_ERR_LEN];
    unsigned char blob[128];
    if (dist_env_detect(&e, err, sizeof(err)) != 0 || dist_control_open(&c, &e, "tcp", 5.0, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 92;
    }
    memset(blob, e.rank == 0 ? 0x5a : 0, sizeof(blob));
    if (dist_control_broadcast(&c, blob, sizeof(blob), err, sizeof(err)) != 0 || blob[127] != 0x5a) {
        fprintf(stderr, "error: broadcast: %s\n", err);
        return 93;
    }
    dist_control_watch(&c, NULL, NULL);
    dist_control_report_failures(&c);
    if (is_failing) {
        fprintf(stderr, "error: out of memory on GPU %d\n", e.local_rank);
        exit(1);
    }
    if (someone_fails) dist_sleep(20.0);
    if (dist_control_close(&c, 5.0, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: close: %s\n", err);
        return 94;
    }
    return 0;
}

static int rank_main(int argc, char** argv) {
    const char* dir = getenv("TEST_LAUNCH_DIR");
    const char* rank = getenv("RANK");
    const char* mode = getenv("TEST_LAUNCH_MODE");
    const char* fail = getenv("TEST_LAUNCH_FAIL_RANK");
    int is_failing = fail && strcmp(fail, rank) == 0;
    char path[512];
    snprintf(path, sizeof(path), "%s/env_%s", dir, rank);
    FILE* f = fopen(path, "w");
    if (!f) return 90;
    const char* vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "TEST_KEEP"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char* v = getenv(vars[i]);
        fprintf(f, "%s=%s\n", vars[i], v ? v : "(unset)");
    }
    fprintf(f, "args=");
    for (int i = 1; i < argc; i++) fprintf(f, "%s%s", i > 1 ? " " : "", argv[i]);
    fprintf(f, "\n");
    fclose(f);
    if (strcmp(mode, "ok") == 0) return 0;
    if (strcmp(mode, "fail") == 0) {  // the failing rank exits 3, the others would sleep 20 s
        if (is_failing) return 3;
        dist_sleep(20.0);
        return 0;
    }
    if (strcmp(mode, "signal") == 0) {  // the failing rank dies of SIGUSR1, the others finish soon after
        if (is_failing) raise(SIGUSR1);
        dist_sleep(0.3);
        return 0;
    }
    if (strcmp(mode, "term") == 0) {  // wait for SIGTERM (at most 10 s), note it, exit 0
        signal(SIGTERM, on_term);
        touch(dir, "ready", rank);
        for (int i = 0; i < 1000 && !got_term; i++) dist_sleep(0.01);
        if (got_term) touch(dir, "term", rank);
        return got_term ? 0 : 4;
    }
    if (strcmp(mode, "control") == 0) return rank_with_control(is_failing, fail != NULL && atoi(fail) >= 0);
    return 91;
}

// --- the launcher's side --------------------------------------------------------------------------

typedef struct {
    int status;       // the launcher process's, as waitpid gives it; -1 when it was still running at the limit
    double took_s;
    char err[4096];   // its stderr
} Launch;

// Forks a launcher running launch_local(n, args, skip, grace_s) in mode (TEST_LAUNCH_MODE). Its pid.
static pid_t launcher_start(const char* name, const char* mode, int fail_rank, int n, const char** args, int nargs,
                            int skip, double grace_s) {
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/%s", tmp_dir, name);
    mkdir(dir, 0755);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0) return pid;
    char path[512];
    snprintf(path, sizeof(path), "%s/launcher.err", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(90);
    close(fd);
    setenv("TEST_LAUNCH_DIR", dir, 1);
    setenv("TEST_LAUNCH_MODE", mode, 1);
    char fail[16];
    snprintf(fail, sizeof(fail), "%d", fail_rank);
    setenv("TEST_LAUNCH_FAIL_RANK", fail, 1);
    char* argv[16];
    for (int i = 0; i < nargs; i++) argv[i] = (char*)args[i];
    argv[nargs] = NULL;
    _exit(launch_local(n, nargs, argv, skip, grace_s));
}

// Waits for the launcher at most limit_s (then SIGKILLs it) and reads its stderr.
static void launcher_wait(const char* name, pid_t pid, double t0, double limit_s, Launch* out) {
    out->status = -1;
    while (dist_now() - t0 < limit_s) {
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) == pid) { out->status = st; break; }
        dist_sleep(0.005);
    }
    out->took_s = dist_now() - t0;
    if (out->status == -1) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); }
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/launcher.err", tmp_dir, name);
    FILE* f = fopen(path, "r");
    size_t got = f ? fread(out->err, 1, sizeof(out->err) - 1, f) : 0;
    out->err[got] = '\0';
    if (f) fclose(f);
    while (waitpid(-1, NULL, WNOHANG) > 0) {}  // ranks orphaned to this process (a child subreaper)
}

static int exited(const Launch* l, int code) { return l->status >= 0 && WIFEXITED(l->status) && WEXITSTATUS(l->status) == code; }

// What rank r wrote about its environment, in buf; 1 when it wrote at all.
static int rank_env(const char* name, int r, char* buf, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/env_%d", tmp_dir, name, r);
    FILE* f = fopen(path, "r");
    if (!f) { buf[0] = '\0'; return 0; }
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
    return 1;
}

static void test_all_succeed(const char* name, const char** args, int nargs, int skip, const char* want_args) {
    setenv("RANK", "7", 1);  // a stale rank variable here must not reach the ranks
    setenv("MASTER_ADDR", "10.1.2.3", 1);
    setenv("MASTER_PORT", "1", 1);
    setenv("NCCL_DEBUG", "WARN", 1);
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    setenv("TEST_KEEP", "a b=c", 1);
    double t0 = dist_now();
    pid_t pid = launcher_start(name, "ok", -1, 3, args, nargs, skip, 1.0);
    unsetenv("RANK"); unsetenv("MASTER_ADDR"); unsetenv("MASTER_PORT");
    Launch l;
    launcher_wait(name, pid, t0, 10.0, &l);
    EXPECT(exited(&l, 0) && l.err[0] == '\0', "%s: launcher status 0x%x, stderr:\n%s", name, l.status, l.err);
    int port0 = -1;
    for (int r = 0; r < 3; r++) {
        char env[2048], want[512];
        EXPECT(rank_env(name, r, env, sizeof(env)), "%s: rank %d did not run", name, r);
        snprintf(want, sizeof(want), "RANK=%d\nWORLD_SIZE=3\nLOCAL_RANK=%d\nLOCAL_WORLD_SIZE=3\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=", r, r);
        EXPECT(strncmp(env, want, strlen(want)) == 0, "%s: rank %d's environment:\n%s\nexpected it to begin:\n%s", name, r, env, want);
        const char* p = strstr(env, "MASTER_PORT=");
        int port = p ? atoi(p + 12) : -1;
        if (r == 0) port0 = port;
        EXPECT(port > 1 && port <= 65535 && port == port0, "%s: rank %d's MASTER_PORT %d (rank 0's %d)", name, r, port, port0);
        snprintf(want, sizeof(want), "NCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME==lo\nTEST_KEEP=a b=c\nargs=%s\n", want_args);
        EXPECT(strstr(env, want) != NULL, "%s: rank %d's environment:\n%s\nlacks:\n%s", name, r, env, want);
    }
    unsetenv("NCCL_DEBUG"); unsetenv("NCCL_SOCKET_IFNAME"); unsetenv("TEST_KEEP");
}

static void test_failures(void) {
    const char* args[] = {"test_launcher", "-gpus", "3"};
    Launch l;
    double t0 = dist_now();
    launcher_wait("fail", launcher_start("fail", "fail", 1, 3, args, 3, 1, 0.5), t0, 10.0, &l);
    EXPECT(exited(&l, 1) && l.took_s >= 0.5 && l.took_s < 3.0, "fail: launcher status 0x%x after %.2f s, expected "
           "exit 1 after the 0.5 s grace period; stderr:\n%s", l.status, l.took_s, l.err);
    const char* wants[] = {"error: rank 1 exited with status 3\n", "error: rank 0 killed by signal 9 (SIGKILL): still running 0.5 s after",
                           "error: rank 2 killed by signal 9 (SIGKILL)"};
    for (int i = 0; i < 3; i++) EXPECT(strstr(l.err, wants[i]) != NULL, "fail: stderr lacks \"%s\":\n%s", wants[i], l.err);
    EXPECT(strncmp(l.err, wants[0], strlen(wants[0])) == 0, "fail: the first line is not the failing rank's:\n%s", l.err);

    t0 = dist_now();
    launcher_wait("signal", launcher_start("signal", "signal", 2, 3, args, 3, 1, 5.0), t0, 10.0, &l);
    EXPECT(exited(&l, 1) && l.took_s < 3.0, "signal: launcher status 0x%x after %.2f s; stderr:\n%s", l.status, l.took_s, l.err);
    EXPECT(strcmp(l.err, "error: rank 2 killed by signal 10 (SIGUSR1)\n") == 0,
           "signal: stderr is not just the line for rank 2:\n%s", l.err);
}

// Waits until every rank of launch `name` wrote its `what` file; 1 when all did within limit_s.
static int wait_files(const char* name, const char* what, int n, double limit_s) {
    double t0 = dist_now();
    for (;;) {
        int all = 1;
        for (int r = 0; r < n; r++) {
            char path[512];
            snprintf(path, sizeof(path), "%s/%s/%s_%d", tmp_dir, name, what, r);
            all &= exists(path);
        }
        if (all) return 1;
        if (dist_now() - t0 > limit_s) return 0;
        dist_sleep(0.01);
    }
}

static void test_signals(void) {
    const char* args[] = {"test_launcher", "-gpus", "3"};
    const char* names[] = {"sigterm", "sigint", "sigkill"};
    int sigs[] = {SIGTERM, SIGINT, SIGKILL};
    for (int i = 0; i < 3; i++) {
        double t0 = dist_now();
        pid_t pid = launcher_start(names[i], "term", -1, 3, args, 3, 1, 1.0);
        EXPECT(wait_files(names[i], "ready", 3, 5.0), "%s: the ranks did not start", names[i]);
        kill(pid, sigs[i]);
        Launch l;
        launcher_wait(names[i], pid, t0, 10.0, &l);
        EXPECT(wait_files(names[i], "term", 3, 3.0), "%s to the launcher: not every rank got SIGTERM", names[i]);
        if (sigs[i] != SIGKILL)
            EXPECT(exited(&l, 0), "%s: launcher status 0x%x, expected 0 (every rank exited 0); stderr:\n%s", names[i], l.status, l.err);
        dist_sleep(0.1);
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
    }
}

// The launcher with ranks that use the control channel: they meet on the launcher's MASTER_PORT; when
// one fails, the others exit with its message long before the grace period ends.
static void test_with_control(void) {
    const char* args[] = {"test_launcher", "-gpus", "3"};
    Launch l;
    double t0 = dist_now();
    launcher_wait("control_ok", launcher_start("control_ok", "control", -1, 3, args, 3, 1, 5.0), t0, 10.0, &l);
    EXPECT(exited(&l, 0) && l.err[0] == '\0', "control_ok: launcher status 0x%x, stderr:\n%s", l.status, l.err);
    t0 = dist_now();
    launcher_wait("control_fail", launcher_start("control_fail", "control", 2, 3, args, 3, 1, 5.0), t0, 10.0, &l);
    EXPECT(exited(&l, 1) && l.took_s < 3.0, "control_fail: launcher status 0x%x after %.2f s (grace 5 s), stderr:\n%s",
           l.status, l.took_s, l.err);
    const char* wants[] = {"[rank 2] error: out of memory on GPU 2\n", "[rank 0] error: rank 2 failed: out of memory on GPU 2\n",
                           "[rank 1] error: rank 2 failed: out of memory on GPU 2\n", "error: rank 2 exited with status 1\n",
                           "error: rank 0 exited with status 1\n", "error: rank 1 exited with status 1\n"};
    for (int i = 0; i < 6; i++) EXPECT(strstr(l.err, wants[i]) != NULL, "control_fail: stderr lacks \"%s\":\n%s", wants[i], l.err);
    EXPECT(strstr(l.err, "SIGKILL") == NULL, "control_fail: a rank had to be killed:\n%s", l.err);
}

static void test_bad_arguments(void) {
    const char* args[] = {"test_launcher", "-x", "-gpus", "0"};
    Launch l;
    launcher_wait("zero", launcher_start("zero", "ok", -1, 0, args, 4, 2, 1.0), dist_now(), 5.0, &l);
    EXPECT(exited(&l, 1) && strstr(l.err, "error: -gpus 0: expected the number of processes"), "-gpus 0: status 0x%x:\n%s",
           l.status, l.err);
    launcher_wait("no_n", launcher_start("no_n", "ok", -1, 2, args, 3, 2, 1.0), dist_now(), 5.0, &l);
    EXPECT(exited(&l, 1) && strstr(l.err, "error: -gpus is not followed by a number"), "-gpus last: status 0x%x:\n%s",
           l.status, l.err);
    char env[64];
    EXPECT(!rank_env("zero", 0, env, sizeof(env)) && !rank_env("no_n", 0, env, sizeof(env)), "a rank ran after bad arguments");
}

int main(int argc, char** argv) {
    if (getenv("TEST_LAUNCH_DIR") && getenv("RANK")) return rank_main(argc, argv);
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_launcher_XXXXXX");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // ranks whose launcher is killed become ours to reap
    double t0 = dist_now();
    const char* mid[] = {"test_launcher", "-a", "1", "-gpus", "3", "-b"};
    test_all_succeed("ok_middle", mid, 6, 3, "-a 1 -b");
    const char* first[] = {"test_launcher", "-gpus", "3", "-a", "x y"};
    test_all_succeed("ok_first", first, 5, 1, "-a x y");
    const char* last[] = {"test_launcher", "-a", "-gpus", "3"};
    test_all_succeed("ok_last", last, 4, 2, "-a");
    test_failures();
    test_signals();
    test_with_control();
    test_bad_arguments();
    printf("(%.1f s)\n", dist_now() - t0);
    if (!test_failed) test_remove_dir(tmp_dir);
    return test_summary("test_launcher");
}
