// dist_control.h: host-only. The control channel of a multi-process run: a TCP star around rank 0.
// It carries two things. First the rendezvous (llmc/dist/dist_rendezvous.h): rank 0 hands every rank a small
// blob (NCCL's 128-byte unique id), and every rank agrees on the world size. Then failures: a monitor
// thread on every rank watches the connections, so that one rank failing (an error exit, a crash,
// SIGKILL) makes every rank print that rank's message and exit at once, instead of hanging in the next
// collective. llmc/dist/dist_report.h makes a rank's own failures report themselves.
//
// -nccl_init tcp: rank 0 listens on MASTER_PORT (default 29500); the others connect to MASTER_ADDR,
// which may be left unset (127.0.0.1) only when every rank is on this machine. -nccl_init file:PATH:
// through a file on a file system all ranks share (rank 0's address: MASTER_ADDR if set, else its own).
//
// A failure (FAIL: the failing rank, its message) goes to rank 0, which relays it to everyone else. A
// connection that closes without a goodbye is a failure too: "rank 3 exited without a message (killed
// or crashed)". Normal end: every rank says BYE, rank 0 answers BYE once all have; from then on a closing
// connection means nothing. World size 1: open, broadcast and close succeed without sockets; watch and
// report_failures do nothing.
//
// Needs _GNU_SOURCE (fopencookie, accept4, pipe2) before the first system header: nvcc's C++ defines it;
// C files #define it at their top. Link with -lpthread where the C library does not include it.
#pragma once
#include <pthread.h>
#include "dist_env.h"
#include "dist_report.h"

#define DIST_DEFAULT_PORT 29500

typedef struct {
    int rank, world;
    DistLink* link;               // NULL when world == 1 or not open
    char* bye;                    // (world,) rank 0: 1 when rank k said goodbye, 2 when it then closed
    double timeout_s;             // of open; broadcast waits as long
    int watching;                 // the monitor thread runs
    pthread_t monitor;
    int wake[2];                  // a pipe: close writes to wake[1] to stop the monitor
    void (*on_abort)(void* user);
    void* user;
    int reporting;                // report_failures installed: the link outlives close
} DistControl;

// A FAIL message's payload (len bytes): the failing rank and its text. 1, or 0/-1 as dist_recv_all.
static inline int dist_read_fail(int fd, uint32_t len, int* rank, char* text, size_t cap, double deadline) {
    unsigned char buf[DIST_MSG_MAX];
    if (len < 4 || len > sizeof(buf)) { errno = EPROTO; return -1; }
    int r = dist_recv_all(fd, buf, len, deadline);
    if (r != 1) return r;
    *rank = (int)dist_get_u32(buf);
    size_t n = len - 4 < cap - 1 ? len - 4 : cap - 1;
    memcpy(text, buf + 4, n);
    text[n] = '\0';
    return 1;
}

// Ends the process DIST_ABORT_WAIT_S after it starts: the way out when on_abort (ncclCommAbort on a
// wedged GPU) or flushing stdout blocks.
#ifndef DIST_ABORT_WAIT_S
#define DIST_ABORT_WAIT_S 10.0
#endif
static inline void* dist_abort_watchdog(void* arg) {
    (void)arg;
    dist_sleep(DIST_ABORT_WAIT_S);
    _exit(1);  // not exit(): the exit hooks and stdio flushes are what may block
}

// A rank failed: print "error: <text>" (continuation lines indented), flush stdout (the last log lines),
// abort the caller's communicator, exit; all of it within DIST_ABORT_WAIT_S.
static inline void dist_control_abort(DistControl* c, const char* text) {
    pthread_t watchdog;
    if (pthread_create(&watchdog, NULL, dist_abort_watchdog, NULL) == 0) pthread_detach(watchdog);
    // this rank crashes: its handler has sent the crash and ends the process by the signal (or, should it
    // not, the watchdog does); an _exit(1) here would hide the signal from whoever waits for this process
    if (c->link && c->link->crashing) for (;;) dist_sleep(1.0);
    char out[2 * DIST_MSG_MAX + 64];
    size_t n = 0;
    dist_append_safe(out, sizeof(out), &n, "error: ");
    for (const char* p = text; *p && n + 4 < sizeof(out); p++) {
        out[n++] = *p;
        if (*p == '\n') { out[n++] = ' '; out[n++] = ' '; }
    }
    out[n++] = '\n';
    int start = 1;
    dist_write_stderr(c->rank, out, n, &start);
    fflush(stdout);
    if (c->on_abort) c->on_abort(c->user);
    _exit(1);  // not exit(): main runs on meanwhile, and the exit hooks would race it
}

static inline void dist_control_free(DistControl* c) {
    if (!c->link) return;
    c->link->done = 1;
    for (int k = 0; k < c->world; k++)
        if (c->link->fds[k] >= 0) { close(c->link->fds[k]); c->link->fds[k] = -1; }
    if (!c->reporting) { free(c->link->fds); free(c->link); }  // else the stream and the exit hook still use it
    free(c->bye);
    c->link = NULL;
    c->bye = NULL;
}

// init: "tcp" or "file:PATH". Every wait ends after timeout_s. 0, or -1 with a message in err that says
// which rank waited for what; rank 0 then tells the ranks already connected.
static inline int dist_control_open(DistControl* c, const DistEnv* e, const char* init, double timeout_s,
                                    char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    c->rank = e->rank;
    c->world = e->world_size;
    c->timeout_s = timeout_s;
    c->wake[0] = c->wake[1] = -1;
    const char* path = strncmp(init, "file:", 5) == 0 && init[5] ? init + 5 : NULL;
    if (!path && strcmp(init, "tcp") != 0) {
        snprintf(err, errlen, "-nccl_init %s: expected tcp or file:PATH (a path on a file system every rank shares)", init);
        return -1;
    }
    if (c->world == 1) return 0;
    char addr[256];
    int port = e->master_port ? e->master_port : DIST_DEFAULT_PORT;
    if (e->master_addr[0]) snprintf(addr, sizeof(addr), "%s", e->master_addr);
    else if (path) dist_host_address(addr, sizeof(addr));
    else if (e->local_world_size == e->world_size) snprintf(addr, sizeof(addr), "127.0.0.1");
    else {
        snprintf(err, errlen, "MASTER_ADDR is not set and the %d ranks are not all on this machine (%s local ranks): "
                 "set MASTER_ADDR to rank 0's host name or address, or use -nccl_init file:PATH with a PATH on a "
                 "file system every rank shares", e->world_size, e->local_world_size ? "fewer" : "unknown number of");
        return -1;
    }
    c->link = (DistLink*)calloc(1, sizeof(DistLink));
    int* fds = (int*)malloc((size_t)c->world * sizeof(int));
    c->bye = (char*)calloc((size_t)c->world, 1);
    if (!c->link || !fds || !c->bye) {
        free(c->link); free(fds); free(c->bye);
        c->link = NULL; c->bye = NULL;
        snprintf(err, errlen, "rank %d: out of host memory for the control channel", c->rank);
        return -1;
    }
    for (int k = 0; k < c->world; k++) fds[k] = -1;
    c->link->rank = c->rank;
    c->link->world = c->world;
    c->link->fds = fds;
    int rc = c->rank == 0 ? dist_rendezvous_serve(c->world, fds, path, addr, port, timeout_s, err, errlen)
                          : dist_rendezvous_join(c->rank, c->world, path, addr, port, timeout_s, &fds[0], err, errlen);
    if (rc != 0) {
        char text[DIST_MSG_MAX];
        snprintf(text, sizeof(text), "rank 0 failed: %s", err);
        if (c->rank == 0) dist_link_send_fail(c->link, 0, text, -1);
        dist_control_free(c);
    }
    return rc;
}

// Rank 0 sends blob (len bytes) to every rank; the others receive it into blob (len: what they expect).
// Before dist_control_watch (the monitor reads the connections after). 0, or -1 with a message in err;
// a failed broadcast closes the channel (the other ranks see it close).
static inline int dist_control_broadcast(DistControl* c, void* blob, size_t len, char* err, size_t errlen) {
    if (c->world == 1) return 0;
    if (!c->link || c->watching) {
        snprintf(err, errlen, "rank %d: dist_control_broadcast needs an open control channel, before dist_control_watch", c->rank);
        return -1;
    }
    int* fds = c->link->fds;
    double deadline = dist_now() + c->timeout_s;
    if (c->rank == 0) {
        for (int k = 1; k < c->world; k++) {
            if (dist_msg_send(fds[k], DIST_MSG_BLOB, NULL, 0, blob, len, deadline) == 0) continue;
            char text[DIST_MSG_MAX];
            snprintf(err, errlen, "rank 0 could not send the broadcast to rank %d: %s", k, strerror(errno));
            snprintf(text, sizeof(text), "rank 0 failed: %s", err);
            dist_link_send_fail(c->link, 0, text, k);
            dist_control_free(c);
            return -1;
        }
        return 0;
    }
    int type = 0, from = 0;
    uint32_t n = 0;
    char text[DIST_MSG_MAX];
    int r = dist_msg_recv_header(fds[0], &type, &n, deadline);
    if (r == 0)
        snprintf(err, errlen, "rank %d: rank 0 closed the connection before its broadcast (it failed or was killed: "
                 "see its output)", c->rank);
    else if (r < 0)
        snprintf(err, errlen, "rank %d waited %g s for rank 0's broadcast (%s)", c->rank, c->timeout_s, strerror(errno));
    else if (type == DIST_MSG_FAIL && dist_read_fail(fds[0], n, &from, text, sizeof(text), deadline) == 1)
        dist_copy_str(err, errlen, text);
    else if (type != DIST_MSG_BLOB || n != len)
        snprintf(err, errlen, "rank 0 broadcast %u bytes (message type %d), rank %d expected %zu: do all ranks run "
                 "the same build?", n, type, c->rank, len);
    else if (dist_recv_all(fds[0], blob, len, deadline) != 1)
        snprintf(err, errlen, "rank %d: rank 0's broadcast broke off (it failed or was killed: see its output)", c->rank);
    else
        return 0;
    dist_control_free(c);
    return -1;
}

// The monitor's reaction to a readable connection: a goodbye (rank 0 notes it), else a failure to print,
// relay (rank 0) and exit on.
static inline void dist_monitor_read(DistControl* c, int k) {
    int fd = c->link->fds[k], type = 0, from = c->rank == 0 ? k : 0, failed = from;
    uint32_t len = 0;
    char text[DIST_MSG_MAX];
    double deadline = dist_now() + 5.0;
    int r = dist_msg_recv_header(fd, &type, &len, deadline);
    if (r == 1 && type == DIST_MSG_BYE && c->rank == 0) { c->bye[k] = 1; return; }
    if (r != 1 && c->rank == 0 && c->bye[k]) { c->bye[k] = 2; return; }  // it said goodbye and gave up waiting
    if (r != 1)
        snprintf(text, sizeof(text), "rank %d exited without a message (killed or crashed)", from);
    else if (type != DIST_MSG_FAIL)
        snprintf(text, sizeof(text), "rank %d sent a message of type %d out of turn: do all ranks run the same build?", from, type);
    else if (dist_read_fail(fd, len, &failed, text, sizeof(text), deadline) != 1)
        snprintf(text, sizeof(text), "rank %d exited while sending its failure", from);
    if (c->rank == 0) dist_link_send_fail(c->link, failed, text, k);
    dist_control_abort(c, text);
}

static inline void* dist_monitor_main(void* arg) {
    DistControl* c = (DistControl*)arg;
    int peers = c->rank == 0 ? c->world : 1;
    struct pollfd* p = (struct pollfd*)malloc((size_t)(peers + 1) * sizeof(struct pollfd));
    int* who = (int*)malloc((size_t)(peers + 1) * sizeof(int));
    if (!p || !who) dist_control_abort(c, "out of host memory for the control channel's monitor");
    for (;;) {
        int n = 0;
        p[n].fd = c->wake[0]; p[n].events = POLLIN; p[n].revents = 0; who[n++] = -1;
        for (int k = 0; k < peers; k++) {
            if (c->link->fds[k] < 0 || (c->rank == 0 && c->bye[k] == 2)) continue;
            p[n].fd = c->link->fds[k]; p[n].events = POLLIN; p[n].revents = 0; who[n++] = k;
        }
        if (poll(p, (nfds_t)n, -1) < 0) continue;  // EINTR
        if (p[0].revents) break;
        for (int i = 1; i < n; i++)
            if (p[i].revents) dist_monitor_read(c, who[i]);
    }
    free(p);
    free(who);
    return NULL;
}

// Starts the monitor thread (with every signal blocked: they go to the caller's threads). When another
// rank fails, this process prints "error: rank K failed: <its message>" to stderr, calls on_abort(user)
// (may be NULL) and _exit(1)s, at most DIST_ABORT_WAIT_S later even if on_abort blocks; rank 0 first
// relays the failure to every other rank.
static inline void dist_control_watch(DistControl* c, void (*on_abort)(void* user), void* user) {
    c->on_abort = on_abort;
    c->user = user;
    if (c->world == 1 || !c->link || c->watching) return;
    if (pipe2(c->wake, O_CLOEXEC) != 0) {
        fprintf(stderr, "warning: rank %d: no monitor of the other ranks (pipe: %s): a failing rank may make this one "
                "wait in the next collective\n", c->rank, strerror(errno));
        return;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->monitor, NULL, dist_monitor_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        fprintf(stderr, "warning: rank %d: no monitor of the other ranks (pthread_create: %s): a failing rank may "
                "make this one wait in the next collective\n", c->rank, strerror(rc));
        close(c->wake[0]); close(c->wake[1]);
        c->wake[0] = c->wake[1] = -1;
        return;
    }
    c->watching = 1;
}

// This rank fails with msg: tell every rank (through rank 0). Returns; the caller exits after it.
static inline void dist_control_fail(DistControl* c, const char* msg) {
    if (!c->link) return;
    char text[DIST_MSG_MAX];
    snprintf(text, sizeof(text), "rank %d failed: %s", c->rank, strncmp(msg, "error: ", 7) == 0 ? msg + 7 : msg);
    dist_link_send_fail(c->link, c->rank, text, -1);
}

// The stderr stream with the tail, the exit hook and the crash handlers of llmc/dist/dist_report.h.
static inline void dist_control_report_failures(DistControl* c) {
    if (c->world == 1 || !c->link || c->reporting) return;
    c->reporting = 1;
    dist_report_install(c->link);
}

// Rank 0's side of the goodbye: waits until every rank said BYE, then answers each. 0, or -1 with the
// failure (relayed to the others) in err.
static inline int dist_control_close_serve(DistControl* c, double timeout_s, char* err, size_t errlen) {
    int* fds = c->link->fds;
    double deadline = dist_now() + timeout_s;
    struct pollfd* p = (struct pollfd*)malloc((size_t)c->world * sizeof(struct pollfd));
    char text[DIST_MSG_MAX];
    int failed = 0, skip = -1;
    text[0] = '\0';
    while (p && !text[0]) {
        int n = 0;
        for (int k = 1; k < c->world; k++)
            if (!c->bye[k]) { p[n].fd = fds[k]; p[n].events = POLLIN; p[n].revents = 0; n++; }
        if (n == 0) break;
        int ready = poll(p, (nfds_t)n, dist_ms_left(deadline));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0 && dist_now() >= deadline) {
            snprintf(text, sizeof(text), "rank 0 waited %g s for %d of %d ranks to finish (not finished:", timeout_s, n, c->world);
            for (int i = 0, k = 1; k < c->world && i < 16; k++)
                if (!c->bye[k]) { dist_appendf(text, sizeof(text), " %d", k); i++; }
            dist_appendf(text, sizeof(text), "%s)", n > 16 ? " ..." : "");
        }
        for (int k = 1, i = 0; k < c->world && !text[0]; k++) {
            if (c->bye[k] || !p[i++].revents) continue;
            int type = 0;
            uint32_t len = 0;
            int r = dist_msg_recv_header(fds[k], &type, &len, deadline);
            if (r == 1 && type == DIST_MSG_BYE) c->bye[k] = 1;
            else if (r == 1 && type == DIST_MSG_FAIL && dist_read_fail(fds[k], len, &failed, text, sizeof(text), deadline) == 1) skip = k;
            else if (r == 1) { snprintf(text, sizeof(text), "rank %d sent a message of type %d out of turn", k, type); failed = skip = k; }
            else { snprintf(text, sizeof(text), "rank %d exited without a message (killed or crashed)", k); failed = skip = k; }
        }
    }
    free(p);
    if (!p) snprintf(text, sizeof(text), "rank 0: out of host memory for the goodbye");
    if (text[0]) {
        dist_link_send_fail(c->link, failed, text, skip);
        dist_copy_str(err, errlen, text);
        return -1;
    }
    for (int k = 1; k < c->world; k++)  // a rank that gave up waiting (bye 2) is gone: the send fails, harmlessly
        dist_msg_send(fds[k], DIST_MSG_BYE, NULL, 0, NULL, 0, dist_now() + 1.0);
    return 0;
}

// Normal end: every rank tells rank 0 it is done; rank 0 waits for all (at most timeout_s) and answers;
// the monitor stops, the sockets close. 0, or -1 with a message in err (another rank failed meanwhile,
// or the wait timed out). After close, a closing connection is not a failure.
static inline int dist_control_close(DistControl* c, double timeout_s, char* err, size_t errlen) {
    if (!c->link) return 0;
    if (c->watching) {
        char b = 1;
        if (write(c->wake[1], &b, 1) != 1) {}  // a full pipe wakes the monitor as well
        pthread_join(c->monitor, NULL);
        close(c->wake[0]); close(c->wake[1]);
        c->wake[0] = c->wake[1] = -1;
        c->watching = 0;
    }
    int rc = 0;
    if (c->rank == 0) {
        rc = dist_control_close_serve(c, timeout_s, err, errlen);
    } else {
        int fd = c->link->fds[0], type = 0, from = 0, r = 0;
        uint32_t n = 0;
        char text[DIST_MSG_MAX];
        double deadline = dist_now() + timeout_s;
        rc = -1;
        if (dist_msg_send(fd, DIST_MSG_BYE, NULL, 0, NULL, 0, deadline) != 0)
            snprintf(err, errlen, "rank %d could not say goodbye to rank 0 (%s): it failed or was killed, see its output",
                     c->rank, strerror(errno));
        else if ((r = dist_msg_recv_header(fd, &type, &n, deadline)) == 0)
            snprintf(err, errlen, "rank %d: rank 0 closed the connection before every rank was done (it failed or was "
                     "killed: see its output)", c->rank);
        else if (r < 0)
            snprintf(err, errlen, "rank %d waited %g s for rank 0 to finish (it answers once every rank is done)",
                     c->rank, timeout_s);
        else if (type == DIST_MSG_FAIL && dist_read_fail(fd, n, &from, text, sizeof(text), deadline) == 1)
            dist_copy_str(err, errlen, text);
        else if (type != DIST_MSG_BYE)
            snprintf(err, errlen, "rank %d: rank 0 sent a message of type %d out of turn", c->rank, type);
        else
            rc = 0;
    }
    dist_control_free(c);
    return rc;
}
