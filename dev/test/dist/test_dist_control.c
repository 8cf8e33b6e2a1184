// test_dist_control.c: CPU tests of the control channel (llmc/dist/dist_control.h, dist_rendezvous.h,
// dist_report.h) with real processes: every rank is a forked child whose stderr goes to a file, checked
// after it exits. Ports are the kernel's free picks (port 0), files live in a mkdtemp directory.
// Checks:
//   rendezvous   tcp on 127.0.0.1 (4 ranks) and file:PATH (3 ranks, rank 0 late, PATH removed after);
//                every rank gets rank 0's 128-byte blob; a stale file of another world size, one naming
//                a dead port, and one naming a live rank 0 of another run (whose nonce is not its own)
//                are waited past, and each of two concurrent runs gets its own blob; world size 1
//                needs no sockets.
//   refusals     ranks of different world sizes, two processes claiming one rank, a bad -nccl_init,
//                MASTER_ADDR missing when the ranks are not all local: each fails with its message.
//   timeouts     a rank waiting for a rank 0 that never comes (tcp, file), rank 0 waiting for ranks
//                that never come: each fails within its timeout, saying which rank waited for what.
//   abort        one rank prints an error and exits 1 (rank 2, and rank 0), calls dist_control_fail,
//                is SIGKILLed (rank 1, and rank 0), crashes with SIGSEGV, or exits 0 without closing,
//                while the others sleep as if inside a collective: the others exit with status 1
//                within 3 s, with the failing rank's message (or "exited without a message", or
//                "crashed: signal 11 (SIGSEGV)" and its last output) on stderr, after on_abort ran (and
//                when on_abort blocks, DIST_ABORT_WAIT_S later), with their buffered stdout flushed.
//                A rank failing while the others wait in dist_control_close: their close fails with it.
//   close        normal close (rank 0 slow, or another rank slow): all exit 0 and nobody reports a
//                failure, also when a rank exits non-zero after its close; "[rank K] " prefixes.
#define _GNU_SOURCE
#define DIST_ABORT_WAIT_S 1.0  // an on_abort that blocks ends after 1 s here (10 s in the trainer)
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../../llmc/dist/dist_control.h"
#include "../testing.h"

#define MAX_RANKS 8
#define BLOB 128

static char tmp_dir[256];

// What the ranks of one run do.
typedef struct {
    const char* name;       // the scenario, in file names and messages
    char init[600];         // -nccl_init
    int port;               // MASTER_PORT (tcp)
    int world;
    int local_world;        // 0: world (all on this machine)
    double timeout_s;
    int late_rank, late_ms; // rank late_rank starts late_ms later
    int seed;               // rank 0's blob is seed-dependent: each run of two concurrent ones its own
    int fail_rank;          // -1: nobody fails
    const char* how;        // how fail_rank fails: exit, fail, kill, segv, noclose, exit_in_close
    int slow_close_rank, slow_close_ms;  // this rank waits before its close
    int exit_after_close;   // rank 1 exits with this status after a successful close (0: none)
    int abort_hangs;        // on_abort never returns
} Run;

static void blob_fill(unsigned char* b, int seed) {
    for (int i = 0; i < BLOB; i++) b[i] = (unsigned char)(i * 7 + seed * 13 + 3);
}

static void on_abort(void* user) {
    const char* msg = (const char*)user;
    if (write(2, msg, strlen(msg)) < 0) {}
    if (strstr(msg, "hangs")) for (;;) pause();  // a wedged ncclCommAbort
}

static void sleep_as_in_collective(void) {  // 10 s, in small steps as a spinning collective would
    for (int i = 0; i < 1000; i++) dist_sleep(0.01);
}

// The body of one rank (a forked child): its exit code.
static int rank_main(const Run* run, int rank, int claimed_world) {
    DistEnv e;
    memset(&e, 0, sizeof(e));
    e.rank = rank;
    e.world_size = claimed_world;
    e.local_rank = rank;
    e.local_world_size = run->local_world ? run->local_world : claimed_world;
    snprintf(e.source, sizeof(e.source), "test");
    e.master_port = run->port;
    if (rank == run->late_rank) dist_sleep(run->late_ms / 1000.0);
    DistControl c;
    char err[DIST_ERR_LEN];
    if (dist_control_open(&c, &e, run->init, run->timeout_s, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: open: %s\n", err);
        return 2;
    }
    unsigned char blob[BLOB], want[BLOB];
    blob_fill(want, run->seed);
    if (rank == 0) memcpy(blob, want, BLOB); else memset(blob, 0, BLOB);
    if (dist_control_broadcast(&c, blob, BLOB, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: broadcast: %s\n", err);
        return 2;
    }
    if (memcmp(blob, want, BLOB) != 0) {
        fprintf(stderr, "error: rank %d got another blob than rank 0's of run %s\n", rank, run->name);
        return 3;
    }
    dist_control_watch(&c, on_abort, (void*)(run->abort_hangs ? "on_abort called, hangs\n" : "on_abort called\n"));
    const char* how = run->how ? run->how : "";
    int fails = run->fail_rank == rank, someone_fails = run->fail_rank >= 0;
    // segv_slow: the crash handler waits 0.5 s between its message and the signal, long enough for rank 0
    // to relay the crash and exit, and for this rank's monitor to see it go
    if (fails && strcmp(how, "segv_slow") == 0) setenv("LLMC_TEST_CRASH_DELAY_MS", "500", 1);
    dist_control_report_failures(&c);
    fprintf(stderr, "rank %d ready\nsecond line of rank %d\n", rank, rank);
    printf("step 1 of rank %d\n", rank);  // stdout is a file here: buffered, out only if flushed
    if (fails) dist_sleep(0.2);  // a failure some steps in: every rank has printed its lines by then
    if (fails && strcmp(how, "exit") == 0) {
        fprintf(stderr, "error: shard data/xyz.bin is missing\n  hint: run make data\n");
        exit(1);
    }
    if (fails && strcmp(how, "fail") == 0) {
        fprintf(stderr, "some noise that is not the message\n");
        dist_control_fail(&c, "loss is NaN at step 7");
        exit(1);
    }
    if (fails && strcmp(how, "kill") == 0) raise(SIGKILL);
    if (fails && strncmp(how, "segv", 4) == 0) {
        fprintf(stderr, "about to crash\n");
        raise(SIGSEGV);
    }
    if (fails && strcmp(how, "noclose") == 0) return 0;
    if (fails && strcmp(how, "exit_in_close") == 0) {
        dist_sleep(0.3);  // the others are in dist_control_close by now
        fprintf(stderr, "error: the final checkpoint could not be written\n");
        exit(1);
    }
    if (someone_fails && strcmp(how, "exit_in_close") != 0) {
        sleep_as_in_collective();
        return 4;  // the failure never reached this rank
    }
    if (rank == run->slow_close_rank) dist_sleep(run->slow_close_ms / 1000.0);
    if (dist_control_close(&c, 5.0, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: close: %s\n", err);
        return 5;
    }
    if (rank == 1 && run->exit_after_close) exit(run->exit_after_close);
    return 0;
}

static void err_path(char* out, size_t n, const Run* run, int rank, int index) {
    snprintf(out, n, "%s/%s_%d_%d.err", tmp_dir, run->name, rank, index);
}

// Forks a process that is rank `rank` of run, claiming world `claimed_world`; its stderr in err_path.
static pid_t spawn_rank(const Run* run, int rank, int claimed_world, int index) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0) return pid;
    char path[512];
    err_path(path, sizeof(path), run, rank, index);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd < 0 || dup2(fd, 2) < 0 || dup2(fd, 1) < 0) _exit(90);  // stdout too
    close(fd);
    alarm(20);  // whatever happens, no child outlives the test
    exit(rank_main(run, rank, claimed_world));
}

typedef struct {
    int status;     // as waitpid gives it; -1: still running at the limit (then killed)
    double exit_s;  // seconds from the wait's start to the exit
    char err[8192]; // its stderr
} Outcome;

// Waits for n processes at most limit_s (then SIGKILLs the rest), and reads their stderr.
static void wait_ranks(const pid_t* pids, int n, double limit_s, Outcome* out, const Run* run, const int* ranks) {
    double t0 = dist_now();
    int left = n;
    for (int i = 0; i < n; i++) out[i].status = -1;
    while (left > 0 && dist_now() - t0 < limit_s) {
        for (int i = 0; i < n; i++) {
            int st = 0;
            if (out[i].status == -1 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                out[i].status = st;
                out[i].exit_s = dist_now() - t0;
                left--;
            }
        }
        dist_sleep(0.005);
    }
    for (int i = 0; i < n; i++) {
        if (out[i].status == -1) { kill(pids[i], SIGKILL); waitpid(pids[i], NULL, 0); out[i].exit_s = limit_s; }
        char path[512];
        err_path(path, sizeof(path), run, ranks[i], i);
        FILE* f = fopen(path, "r");
        size_t got = f ? fread(out[i].err, 1, sizeof(out[i].err) - 1, f) : 0;
        out[i].err[got] = '\0';
        if (f) fclose(f);
    }
}

// Runs ranks 0..world-1 of run to the end.
static void run_all(const Run* run, Outcome* out, double limit_s) {
    pid_t pids[MAX_RANKS];
    int ranks[MAX_RANKS];
    for (int r = 0; r < run->world; r++) { ranks[r] = r; pids[r] = spawn_rank(run, r, run->world, r); }
    wait_ranks(pids, run->world, limit_s, out, run, ranks);
}

static int exited(const Outcome* o, int code) { return o->status >= 0 && WIFEXITED(o->status) && WEXITSTATUS(o->status) == code; }

static Run run_new(const char* name, int world) {
    Run r;
    memset(&r, 0, sizeof(r));
    r.name = name;
    r.world = world;
    r.timeout_s = 5.0;
    r.late_rank = r.fail_rank = r.slow_close_rank = -1;
    r.port = dist_free_port();
    snprintf(r.init, sizeof(r.init), "tcp");
    return r;
}

// Every rank exited 0 and none reported a failure.
static void expect_all_ok(const Run* run, const Outcome* out) {
    for (int r = 0; r < run->world; r++) {
        EXPECT(exited(&out[r], 0), "%s: rank %d: status 0x%x, expected exit 0; its stderr:\n%s", run->name, r, out[r].status, out[r].err);
        EXPECT(strstr(out[r].err, "error") == NULL && strstr(out[r].err, "failed") == NULL && strstr(out[r].err, "on_abort") == NULL,
               "%s: rank %d reported a failure:\n%s", run->name, r, out[r].err);
        char want[96];
        snprintf(want, sizeof(want), "[rank %d] rank %d ready\n[rank %d] second line of rank %d\n", r, r, r, r);
        EXPECT(strstr(out[r].err, want) != NULL, "%s: rank %d's stderr lacks the prefixed lines \"%s\":\n%s", run->name, r, want, out[r].err);
    }
}

// Every rank but the failing one exited 1 within 3 s, after on_abort, with `want` on stderr.
static void expect_others_abort(const Run* run, const Outcome* out, const char* want) {
    for (int r = 0; r < run->world; r++) {
        if (r == run->fail_rank) continue;
        EXPECT(exited(&out[r], 1) && out[r].exit_s < 3.0, "%s: rank %d: status 0x%x after %.2f s, expected exit 1 "
               "within 3 s; its stderr:\n%s", run->name, r, out[r].status, out[r].exit_s, out[r].err);
        EXPECT(strstr(out[r].err, want) != NULL, "%s: rank %d's stderr lacks \"%s\":\n%s", run->name, r, want, out[r].err);
        EXPECT(strstr(out[r].err, "on_abort called") != NULL, "%s: rank %d did not call on_abort:\n%s", run->name, r, out[r].err);
        char step[32];
        snprintf(step, sizeof(step), "step 1 of rank %d\n", r);
        EXPECT(strstr(out[r].err, step) != NULL, "%s: rank %d's stdout was not flushed:\n%s", run->name, r, out[r].err);
    }
}

static void test_rendezvous(void) {
    Outcome out[MAX_RANKS];
    Run run = run_new("tcp_ok", 4);  // rank 0 slow to close: the others' close waits for it
    run.slow_close_rank = 0; run.slow_close_ms = 300;
    run_all(&run, out, 10.0);
    expect_all_ok(&run, out);

    run = run_new("file_ok", 3);  // rank 0 late: the others poll for the file; rank 2 slow to close
    snprintf(run.init, sizeof(run.init), "file:%s/rdv_ok", tmp_dir);
    run.late_rank = 0; run.late_ms = 300; run.slow_close_rank = 2; run.slow_close_ms = 300;
    run_all(&run, out, 10.0);
    expect_all_ok(&run, out);
    EXPECT(access(run.init + 5, F_OK) != 0, "file_ok: rank 0 left %s behind", run.init + 5);

    run = run_new("after_close", 3);  // a rank exiting non-zero after its close is not a failure
    run.exit_after_close = 7;
    run_all(&run, out, 10.0);
    EXPECT(exited(&out[0], 0) && exited(&out[2], 0) && exited(&out[1], 7), "after_close: statuses 0x%x 0x%x 0x%x, "
           "expected exit 0, 7, 0; stderr of rank 0:\n%s", out[0].status, out[1].status, out[2].status, out[0].err);
    EXPECT(strstr(out[0].err, "failed") == NULL && strstr(out[2].err, "failed") == NULL,
           "after_close: a failure was reported:\n%s\n%s", out[0].err, out[2].err);

    // stale files: another world size, then a dead port; rank 0 comes 400 ms after the others
    const char* stale[] = {"127.0.0.1 %d 7 42\n", "127.0.0.1 %d 3 42\n", "garbage\n"};
    const char* names[] = {"stale_world", "stale_port", "stale_garbage"};
    for (int i = 0; i < 3; i++) {
        run = run_new(names[i], 3);
        snprintf(run.init, sizeof(run.init), "file:%s/rdv_%s", tmp_dir, names[i]);
        FILE* f = fopen(run.init + 5, "w");
        fprintf(f, stale[i], dist_free_port());
        fclose(f);
        run.late_rank = 0; run.late_ms = 400;
        run_all(&run, out, 10.0);
        expect_all_ok(&run, out);
    }

    // a stale file naming a live rank 0 of another run (run x): run y's ranks must not join it
    Run x = run_new("live_x", 3), y = run_new("live_y", 3);
    snprintf(x.init, sizeof(x.init), "file:%s/rdv_x", tmp_dir);
    snprintf(y.init, sizeof(y.init), "file:%s/rdv_y", tmp_dir);
    x.seed = 1; y.seed = 2;
    y.late_rank = 0; y.late_ms = 600;
    pid_t pids[6];
    int ranks[6] = {0, 1, 2, 0, 1, 2};
    pids[0] = spawn_rank(&x, 0, 3, 0);
    char line[256] = "";
    for (int i = 0; i < 400 && !line[0]; i++) {  // x's rank 0 published its file: copy it with another nonce
        FILE* f = fopen(x.init + 5, "r");
        if (f) { if (!fgets(line, sizeof(line), f)) line[0] = '\0'; fclose(f); }
        if (!line[0]) dist_sleep(0.005);
    }
    char host[64];
    int port = 0, world = 0;
    unsigned long long nonce = 0;
    EXPECT(sscanf(line, "%63s %d %d %llu", host, &port, &world, &nonce) == 4 && world == 3,
           "live_x: rank 0's rendezvous file holds \"%s\"", line);
    FILE* f = fopen(y.init + 5, "w");
    fprintf(f, "%s %d %d %llu\n", host, port, world, nonce + 1);
    fclose(f);
    pids[4] = spawn_rank(&y, 1, 3, 1);
    pids[5] = spawn_rank(&y, 2, 3, 2);
    dist_sleep(0.3);  // y's ranks knock at x's rank 0 meanwhile
    pids[1] = spawn_rank(&x, 1, 3, 1);
    pids[2] = spawn_rank(&x, 2, 3, 2);
    pids[3] = spawn_rank(&y, 0, 3, 0);
    Outcome xy[6];
    wait_ranks(pids, 3, 10.0, xy, &x, ranks);
    wait_ranks(pids + 3, 3, 10.0, xy + 3, &y, ranks + 3);
    expect_all_ok(&x, xy);
    expect_all_ok(&y, xy + 3);

    // world size 1: no sockets, nothing waited for (the port is taken by the listener here)
    int busy_port = 0, busy = dist_listen(0, &busy_port);
    DistEnv e;
    memset(&e, 0, sizeof(e));
    e.world_size = 1; e.local_world_size = 1; e.master_port = busy_port;
    DistControl c;
    char err[DIST_ERR_LEN] = "";
    unsigned char blob[BLOB] = {1, 2, 3};
    double t0 = dist_now();
    int ok = dist_control_open(&c, &e, "tcp", 5.0, err, sizeof(err)) == 0 &&
             dist_control_broadcast(&c, blob, BLOB, err, sizeof(err)) == 0;
    dist_control_watch(&c, NULL, NULL);
    dist_control_report_failures(&c);
    ok = ok && dist_control_close(&c, 5.0, err, sizeof(err)) == 0;
    EXPECT(ok && blob[2] == 3 && dist_now() - t0 < 0.5 && c.link == NULL, "world size 1: %s", err);
    close(busy);
}

// In-process: open must fail within [timeout, timeout + 1.5 s) with every string of wants in its message.
static void expect_open_fails(const char* what, const DistEnv* e, const char* init, double timeout_s, const char* const* wants) {
    DistControl c;
    char err[DIST_ERR_LEN] = "";
    double t0 = dist_now();
    int rc = dist_control_open(&c, e, init, timeout_s, err, sizeof(err));
    double took = dist_now() - t0;
    EXPECT(rc == -1 && took >= timeout_s * 0.99 && took < timeout_s + 1.5, "%s: rc %d after %.2f s (timeout %.1f s): %s",
           what, rc, took, timeout_s, err);
    for (int i = 0; wants[i]; i++) EXPECT(strstr(err, wants[i]) != NULL, "%s: \"%s\" lacks \"%s\"", what, err, wants[i]);
}

static void test_refusals_and_timeouts(void) {
    DistEnv e;
    memset(&e, 0, sizeof(e));
    e.rank = 1; e.world_size = 2; e.local_rank = 1; e.local_world_size = 2;
    e.master_port = dist_free_port();  // nobody listens there
    char want[400], path[512];
    snprintf(want, sizeof(want), "rank 1 waited 1 s for rank 0 at 127.0.0.1:%d", e.master_port);
    expect_open_fails("tcp, no rank 0", &e, "tcp", 1.0, (const char* const[]){want, NULL});
    e.rank = 2; e.world_size = 3; e.local_world_size = 3;
    snprintf(path, sizeof(path), "file:%s/never", tmp_dir);
    snprintf(want, sizeof(want), "rank 2 waited 0.5 s for rank 0 to write %s/never", tmp_dir);
    expect_open_fails("file, no rank 0", &e, path, 0.5, (const char* const[]){want, NULL});
    e.rank = 0; e.local_rank = 0;
    e.master_port = dist_free_port();
    snprintf(want, sizeof(want), "rank 0 waited 1 s for 2 of 3 ranks to connect to 127.0.0.1:%d (not connected: 1 2)", e.master_port);
    expect_open_fails("tcp, no other ranks", &e, "tcp", 1.0, (const char* const[]){want, NULL});
    snprintf(path, sizeof(path), "file:%s/rdv_alone", tmp_dir);
    expect_open_fails("file, no other ranks", &e, path, 0.5, (const char* const[]){"rank 0 waited 0.5 s for 2 of 3 ranks", "rdv_alone", NULL});
    EXPECT(access(path + 5, F_OK) != 0, "rank 0 left %s behind after its timeout", path + 5);
    e.local_world_size = 2;  // not all local: MASTER_ADDR is needed
    expect_open_fails("MASTER_ADDR unset", &e, "tcp", 0.0, (const char* const[]){"MASTER_ADDR is not set", "file:PATH", NULL});
    e.local_world_size = 3;
    expect_open_fails("bad -nccl_init", &e, "udp", 0.0, (const char* const[]){"-nccl_init udp", "tcp or file:PATH", NULL});
    expect_open_fails("file: without a path", &e, "file:", 0.0, (const char* const[]){"-nccl_init file:", NULL});

    // ranks of different world sizes: both refuse, each saying so
    Outcome out[MAX_RANKS];
    Run run = run_new("worlds", 2);
    pid_t pids[3] = {spawn_rank(&run, 0, 2, 0), spawn_rank(&run, 1, 3, 1), 0};
    int ranks[3] = {0, 1, 1};
    wait_ranks(pids, 2, 10.0, out, &run, ranks);
    for (int i = 0; i < 2; i++)
        EXPECT(exited(&out[i], 2) && strstr(out[i].err, "rank 1 was started with world size 3, rank 0 with 2"),
               "worlds: process %d: status 0x%x, stderr:\n%s", i, out[i].status, out[i].err);

    // two processes claiming rank 1: rank 0 refuses, and every process fails
    run = run_new("twice", 3);
    for (int i = 0; i < 3; i++) pids[i] = spawn_rank(&run, ranks[i] = i ? 1 : 0, 3, i);
    wait_ranks(pids, 3, 10.0, out, &run, ranks);
    EXPECT(exited(&out[0], 2) && strstr(out[0].err, "two processes say they are rank 1"), "twice: rank 0: status 0x%x:\n%s",
           out[0].status, out[0].err);
    for (int i = 1; i < 3; i++)
        EXPECT(exited(&out[i], 2) && strstr(out[i].err, "two processes say they are rank 1") && out[i].exit_s < 3.0,
               "twice: process %d: status 0x%x after %.2f s:\n%s", i, out[i].status, out[i].exit_s, out[i].err);
}

static void test_abort(void) {
    Outcome out[MAX_RANKS];
    struct { const char* name; int world, fail_rank; const char* how; const char* want, *want2; } cases[] = {
        {"exit_rank2", 4, 2, "exit", "error: rank 2 failed: shard data/xyz.bin is missing\n", "]     hint: run make data\n"},
        {"exit_rank0", 3, 0, "exit", "error: rank 0 failed: shard data/xyz.bin is missing\n", "]     hint: run make data\n"},
        {"fail_call", 3, 1, "fail", "error: rank 1 failed: loss is NaN at step 7\n", NULL},
        {"kill_rank1", 3, 1, "kill", "error: rank 1 exited without a message (killed or crashed)\n", NULL},
        {"kill_rank0", 3, 0, "kill", "error: rank 0 exited without a message (killed or crashed)\n", NULL},
        {"segv_rank3", 4, 3, "segv", "error: rank 3 crashed: signal 11 (SIGSEGV); its last output:\n", "]   about to crash\n"},
        {"segv_slow_rank3", 4, 3, "segv_slow", "error: rank 3 crashed: signal 11 (SIGSEGV); its last output:\n",
         "]   about to crash\n"},
        {"noclose", 3, 2, "noclose", "error: rank 2 exited (status 0) without closing the control channel", NULL},
        {"abort_hangs", 3, 1, "exit", "error: rank 1 failed: shard data/xyz.bin is missing\n", "on_abort called, hangs"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Run run = run_new(cases[i].name, cases[i].world);
        run.fail_rank = cases[i].fail_rank;
        run.how = cases[i].how;
        run.abort_hangs = strcmp(run.name, "abort_hangs") == 0;
        run_all(&run, out, 15.0);
        expect_others_abort(&run, out, cases[i].want);
        if (cases[i].want2) expect_others_abort(&run, out, cases[i].want2);
        const Outcome* failed = &out[run.fail_rank];
        if (strcmp(run.how, "exit") == 0 || strcmp(run.how, "fail") == 0)
            EXPECT(exited(failed, 1), "%s: the failing rank: status 0x%x", run.name, failed->status);
        if (strcmp(run.how, "kill") == 0)
            EXPECT(failed->status >= 0 && WIFSIGNALED(failed->status) && WTERMSIG(failed->status) == SIGKILL,
                   "%s: the failing rank: status 0x%x", run.name, failed->status);
        if (strncmp(run.how, "segv", 4) == 0) {
            EXPECT(failed->status >= 0 && WIFSIGNALED(failed->status) && WTERMSIG(failed->status) == SIGSEGV,
                   "%s: the crashing rank: status 0x%x, expected death by SIGSEGV", run.name, failed->status);
            EXPECT(strstr(failed->err, "[rank 3] rank 3 crashed: signal 11 (SIGSEGV)") != NULL,
                   "%s: the crashing rank's own stderr:\n%s", run.name, failed->err);
            EXPECT(strstr(out[0].err, "  about to crash") != NULL, "%s: rank 0 lacks the crashed rank's last output:\n%s",
                   run.name, out[0].err);
        }
        if (strcmp(run.how, "exit") == 0) {
            char own[64];
            snprintf(own, sizeof(own), "[rank %d] error: shard data/xyz.bin is missing\n", run.fail_rank);
            EXPECT(strstr(failed->err, own) != NULL, "%s: the failing rank's own stderr lacks \"%s\":\n%s", run.name, own, failed->err);
        }
        char earlier[64];  // the failing rank's earlier output: not part of its message (but of a crash's)
        snprintf(earlier, sizeof(earlier), "second line of rank %d", run.fail_rank);
        for (int r = 0; r < run.world; r++)
            EXPECT(r == run.fail_rank || (strstr(out[r].err, "noise") == NULL && (strncmp(run.how, "segv", 4) == 0 ||
                   strstr(out[r].err, earlier) == NULL)), "%s: rank %d printed more of the failing rank's output "
                   "than its message:\n%s", run.name, r, out[r].err);
    }
    // a rank failing while the others wait in dist_control_close: their close fails with its message
    Run run = run_new("in_close", 3);
    run.fail_rank = 1;
    run.how = "exit_in_close";
    run_all(&run, out, 10.0);
    for (int r = 0; r < 3; r += 2)
        EXPECT(exited(&out[r], 5) && strstr(out[r].err, "error: close: rank 1 failed: the final checkpoint could not be written"),
               "in_close: rank %d: status 0x%x, stderr:\n%s", r, out[r].status, out[r].err);
}

int main(void) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_dist_control_XXXXXX");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    double t0 = dist_now();
    test_rendezvous();
    test_refusals_and_timeouts();
    test_abort();
    printf("(%.1f s)\n", dist_now() - t0);
    if (!test_failed) test_remove_dir(tmp_dir);
    return test_summary("test_dist_control");
}
