// dist_rendezvous.h: host-only. How the ranks of a run find rank 0 and connect to it (the star that
// llmc/dist/dist_control.h then uses). Two ways, as -nccl_init names them:
//   tcp        rank 0 listens on `port` on every IPv4 address; the others connect to addr:port.
//   file:PATH  rank 0 listens on a free port and writes "host port world_size nonce" to PATH atomically
//              (llmc/core/atomic_file.h); the others poll PATH until it appears and connect. Rank 0 removes
//              PATH once every rank is in (or it gives up).
// Each connecting rank says HELLO(rank, world_size, nonce); rank 0 answers WELCOME, or REJECT with the
// reason (another world size, a rank twice), or STALE when the nonce is not its own: that rank read an
// old run's file whose port now belongs to someone else, and reads the file again. A file for another
// world size and a port that refuses are waited past in the same way, so a stale file never makes a
// rank join the wrong run or hang: every wait ends after timeout_s with a message naming the rank and
// what it waited for. In tcp mode the nonce is 0 on both sides.
#pragma once
#include <stdlib.h>
#include "../core/atomic_file.h"
#include "dist_socket.h"

enum { DIST_MSG_HELLO = 1, DIST_MSG_WELCOME, DIST_MSG_REJECT, DIST_MSG_STALE, DIST_MSG_BLOB, DIST_MSG_FAIL, DIST_MSG_BYE };

// Rank 0: accepts world - 1 ranks on lfd into fds[1..world-1] (-1 on entry). where: "host:port" for messages.
static inline int dist_rendezvous_accept(int world, int* fds, int lfd, const char* where, uint64_t nonce,
                                         double timeout_s, char* err, size_t errlen) {
    double deadline = dist_now() + timeout_s;
    for (int connected = 0; connected < world - 1;) {
        if (!dist_wait_fd(lfd, POLLIN, deadline)) {
            int missing = world - 1 - connected, shown = 0;
            snprintf(err, errlen, "rank 0 waited %g s for %d of %d ranks to connect to %s (not connected:",
                     timeout_s, missing, world, where);
            for (int k = 1; k < world && shown < 16; k++)
                if (fds[k] < 0) { dist_appendf(err, errlen, " %d", k); shown++; }
            dist_appendf(err, errlen, "%s); did they start, with the same -nccl_init?", missing > shown ? " ..." : "");
            return -1;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;  // EINTR, ECONNABORTED, ...: wait again
        dist_socket_options(fd);
        int type = 0;
        uint32_t len = 0;
        unsigned char h[16];
        double hello_deadline = dist_now() + 5.0 < deadline ? dist_now() + 5.0 : deadline;
        if (dist_msg_recv_header(fd, &type, &len, hello_deadline) != 1 || type != DIST_MSG_HELLO || len != 16 ||
            dist_recv_all(fd, h, 16, hello_deadline) != 1) { close(fd); continue; }  // not one of ours
        int rank = (int)dist_get_u32(h), their_world = (int)dist_get_u32(h + 4);
        uint64_t their_nonce = ((uint64_t)dist_get_u32(h + 8) << 32) | dist_get_u32(h + 12);
        if (their_nonce != nonce) {
            dist_msg_send(fd, DIST_MSG_STALE, NULL, 0, NULL, 0, hello_deadline);
            close(fd);
            continue;
        }
        if (their_world != world)
            snprintf(err, errlen, "rank %d was started with world size %d, rank 0 with %d: every rank must be "
                     "launched with the same number of ranks", rank, their_world, world);
        else if (rank <= 0 || rank >= world || fds[rank] >= 0)
            snprintf(err, errlen, "two processes say they are rank %d of %d: check the launcher's rank variables", rank, world);
        else {
            dist_msg_send(fd, DIST_MSG_WELCOME, NULL, 0, NULL, 0, hello_deadline);
            fds[rank] = fd;
            connected++;
            continue;
        }
        dist_msg_send(fd, DIST_MSG_REJECT, NULL, 0, err, strlen(err), hello_deadline);
        close(fd);
        return -1;
    }
    return 0;
}

// Rank 0's side: listen, (file) publish the address, accept everyone, (file) remove the file. fds (world,)
// gets the connections; on failure the ones made are left in fds, for the caller to tell them why.
static inline int dist_rendezvous_serve(int world, int* fds, const char* path, const char* addr, int port,
                                        double timeout_s, char* err, size_t errlen) {
    int bound = 0;
    int lfd = dist_listen(path ? 0 : port, &bound);
    if (lfd < 0) {
        if (path) snprintf(err, errlen, "rank 0 cannot open a listening socket: %s", strerror(errno));
        else snprintf(err, errlen, "rank 0 cannot listen on port %d: %s; is another run using it? set MASTER_PORT "
                      "to a free port", port, strerror(errno));
        return -1;
    }
    char where[512];
    uint64_t nonce = 0;
    if (path) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        nonce = ((uint64_t)t.tv_sec * 1000000007ULL + (uint64_t)t.tv_nsec) * 6364136223846793005ULL ^ (uint64_t)getpid();
        char line[512];
        int n = snprintf(line, sizeof(line), "%s %d %d %llu\n", addr, bound, world, (unsigned long long)nonce);
        if (atomic_write_file(path, line, (size_t)n) != 0) {
            snprintf(err, errlen, "rank 0 cannot write the rendezvous file %s: %s; -nccl_init file:PATH needs a "
                     "directory that every rank can reach and rank 0 can write", path, strerror(errno));
            close(lfd);
            return -1;
        }
        snprintf(where, sizeof(where), "%s:%d (published in %s)", addr, bound, path);
    } else {
        snprintf(where, sizeof(where), "%s:%d", addr, bound);
    }
    int rc = dist_rendezvous_accept(world, fds, lfd, where, nonce, timeout_s, err, errlen);
    if (path) remove(path);
    close(lfd);
    return rc;
}

// The rendezvous file's host, port and nonce when it is for a run of `world` ranks: 1. Not there, not
// readable, or another run's: 0, and why says what is awaited.
static inline int dist_rendezvous_read(const char* path, int world, char* host, size_t hostlen, int* port,
                                       uint64_t* nonce, char* why, size_t whylen) {
    FILE* f = fopen(path, "r");
    if (!f) { snprintf(why, whylen, "to write %s (%s)", path, strerror(errno)); return 0; }
    char h[256];
    int file_port = 0, file_world = 0;
    unsigned long long n = 0;
    int got = fscanf(f, "%255s %d %d %llu", h, &file_port, &file_world, &n);
    fclose(f);
    if (got != 4 || file_port < 1 || file_port > 65535) {
        snprintf(why, whylen, "to write %s (it holds no \"host port world_size nonce\")", path);
        return 0;
    }
    if (file_world != world) {
        snprintf(why, whylen, "to write %s (it is for a run of %d ranks, this one has %d: a file of an old run?)",
                 path, file_world, world);
        return 0;
    }
    snprintf(host, hostlen, "%s", h);
    *port = file_port;
    *nonce = n;
    return 1;
}

// Rank r's side: find rank 0 (tcp: addr:port; file: what path says), connect, say HELLO, until WELCOME
// (*fd: the connection) or REJECT or the deadline (-1, message in err).
static inline int dist_rendezvous_join(int rank, int world, const char* path, const char* addr, int port,
                                       double timeout_s, int* fd, char* err, size_t errlen) {
    double deadline = dist_now() + timeout_s;
    char why[768], host[256];  // why: what the last attempt waited for, in the timeout message
    snprintf(why, sizeof(why), "at %s:%d", addr, port);
    for (int attempt = 0;; attempt++) {
        if (attempt > 0) {
            if (dist_now() >= deadline) {
                snprintf(err, errlen, "rank %d waited %g s for rank 0 %s; did rank 0 start, with the same -nccl_init?",
                         rank, timeout_s, why);
                return -1;
            }
            dist_sleep(0.05);
        }
        uint64_t nonce = 0;
        snprintf(host, sizeof(host), "%s", addr);
        if (path && !dist_rendezvous_read(path, world, host, sizeof(host), &port, &nonce, why, sizeof(why))) continue;
        double attempt_deadline = dist_now() + 5.0 < deadline ? dist_now() + 5.0 : deadline;
        int gai = 0;
        *fd = dist_connect(host, port, attempt_deadline, &gai);
        if (*fd < 0 && gai != 0 && gai != EAI_AGAIN) {
            snprintf(err, errlen, "rank %d cannot resolve rank 0's host \"%s\" (from %s): %s", rank, host,
                     path ? path : "MASTER_ADDR", gai_strerror(gai));
            return -1;
        }
        if (*fd < 0) {
            snprintf(why, sizeof(why), "at %s:%d (%s)", host, port, gai ? gai_strerror(gai) : strerror(errno));
            continue;
        }
        unsigned char h[16];
        dist_put_u32(h, (uint32_t)rank);
        dist_put_u32(h + 4, (uint32_t)world);
        dist_put_u32(h + 8, (uint32_t)(nonce >> 32));
        dist_put_u32(h + 12, (uint32_t)nonce);
        int type = 0;
        uint32_t len = 0;
        if (dist_msg_send(*fd, DIST_MSG_HELLO, h, 16, NULL, 0, attempt_deadline) != 0 ||
            dist_msg_recv_header(*fd, &type, &len, attempt_deadline) != 1) {
            snprintf(why, sizeof(why), "at %s:%d (it closed the connection or did not answer)", host, port);
        } else if (type == DIST_MSG_WELCOME) {
            return 0;
        } else if (type == DIST_MSG_REJECT) {
            char text[512];  // rank 0's reason: one line
            size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
            if (dist_recv_all(*fd, text, n, attempt_deadline) != 1) n = 0;
            text[n] = '\0';
            snprintf(err, errlen, "rank 0 refused rank %d: %s", rank, n ? text : "(no reason given)");
            close(*fd);
            *fd = -1;
            return -1;
        } else {
            snprintf(why, sizeof(why), "at %s:%d (%s)", host, port, type == DIST_MSG_STALE ? "it is another run's "
                     "rank 0: a stale rendezvous file?" : "it does not speak this protocol");
        }
        close(*fd);
        *fd = -1;
    }
}
