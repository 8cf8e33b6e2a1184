// dist_report.h: host-only. How a rank's own failure reaches the other ranks (llmc/dist/dist_control.h sets
// it up with dist_control_report_failures; the monitor threads there print it and exit):
//   stderr     replaced by a stream (fopencookie) that writes through to fd 2, unbuffered, prefixes each
//              line with "[rank K] " and keeps the last DIST_TAIL bytes;
//   exit       an on_exit() hook: a non-zero status sends that tail as this rank's message (an exit 0
//              without dist_control_close is reported too: the others would wait for this rank forever);
//   crash      handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (on an alternate stack, so a stack
//              overflow is reported too) send "rank K crashed: signal N (NAME)" and the tail, with
//              async-signal-safe calls only, then re-raise the signal with its default action.
// A failure is sent once per process (DistLink.done), to rank 0, which relays it; rank 0 sends its own to
// everyone. The state all of these use is a DistLink on the heap, never freed once reporting: the stream
// and the exit hook run after main's frame is gone.
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <features.h>
#ifndef __USE_GNU
#error "dist_report.h needs _GNU_SOURCE (fopencookie): #define _GNU_SOURCE before the first #include of the file"
#endif
#include <signal.h>
#include <stdlib.h>
#include "dist_rendezvous.h"

#define DIST_TAIL 4096        // bytes of stderr kept, sent as the message of a rank that exits non-zero
#define DIST_ALT_STACK 65536  // the crash handlers' stack (DIST_MSG_MAX-sized buffers live on it)

typedef struct {
    int rank, world;
    int* fds;                    // (world,) rank 0: fds[k] the connection to rank k; others: fds[0] to rank 0; -1: none
    volatile sig_atomic_t done;  // 1 once closed, or once this rank's failure was sent: nothing more to send
    volatile sig_atomic_t crashing;  // a crash handler runs: the process ends by its signal, not by an exit
    long crash_delay_ns;         // test hook LLMC_TEST_CRASH_DELAY_MS: the handler waits between its message
                                 // and the signal, as a descheduled thread may; 0 in normal use
    char tail[DIST_TAIL];        // a ring of the last DIST_TAIL bytes written to stderr
    size_t tail_total;           // bytes written to stderr in all
    int line_start;              // the next byte written to stderr begins a line (it gets the prefix)
    void* alt_stack;             // (DIST_ALT_STACK,) bytes, the crash handlers' stack
} DistLink;

// The crash handlers reach the link only through this: a signal handler takes no argument, so it can
// reach nothing but a global. llmc/'s one mutable global (dev/test/core/test_llmc_globals.sh allows it alone).
static DistLink* dist_crash_link = NULL;

// Sends FAIL(rank, text) to rank 0, or from rank 0 to every rank except `skip` (-1: none). text is what
// every rank prints after "error: ", naming the rank: "rank 2 failed: <its message>", "rank 3 exited
// without a message (killed or crashed)". Once per process. Async-signal-safe.
static inline void dist_link_send_fail(DistLink* l, int rank, const char* text, int skip) {
    if (l->done) return;
    l->done = 1;
    unsigned char head[4];
    dist_put_u32(head, (uint32_t)rank);
    size_t n = strlen(text);
    if (n > DIST_MSG_MAX - 4) { text += n - (DIST_MSG_MAX - 4); n = DIST_MSG_MAX - 4; }  // the end matters most
    double deadline = dist_now() + 2.0;
    for (int k = 0; k < (l->rank == 0 ? l->world : 1); k++)
        if (k != skip && l->fds[k] >= 0) dist_msg_send(l->fds[k], DIST_MSG_FAIL, head, 4, text, n, deadline);
}

// Appends s to buf (cap bytes, *n used), cutting what does not fit. Async-signal-safe.
static inline void dist_append_safe(char* buf, size_t cap, size_t* n, const char* s) {
    while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
    buf[*n] = '\0';
}

static inline void dist_append_int(char* buf, size_t cap, size_t* n, int v) {
    char digits[16];
    int d = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do { digits[d++] = (char)('0' + u % 10); u /= 10; } while (u > 0);
    if (v < 0) digits[d++] = '-';
    char s[17];
    for (int i = 0; i < d; i++) s[i] = digits[d - 1 - i];
    s[d] = '\0';
    dist_append_safe(buf, cap, n, s);
}

// Writes buf to fd 2, each line after the prefix "[rank me] "; *line_start: the first byte begins a line
// (updated for the next call). Async-signal-safe.
static inline void dist_write_stderr(int me, const char* buf, size_t n, int* line_start) {
    char out[1024], prefix[32];
    size_t m = 0, plen = 0;
    dist_append_safe(prefix, sizeof(prefix), &plen, "[rank ");
    dist_append_int(prefix, sizeof(prefix), &plen, me);
    dist_append_safe(prefix, sizeof(prefix), &plen, "] ");
    for (size_t i = 0; i <= n; i++) {
        if (i == n || m + plen + 1 > sizeof(out)) {
            for (size_t off = 0; off < m;) {
                ssize_t w = write(2, out + off, m - off);
                if (w > 0) off += (size_t)w;
                else if (w < 0 && errno == EINTR) continue;
                else break;  // stderr is gone: nothing to tell it
            }
            m = 0;
            if (i == n) break;
        }
        if (*line_start) { memcpy(out + m, prefix, plen); m += plen; }
        out[m++] = buf[i];
        *line_start = buf[i] == '\n';
    }
}

// The last bytes written to stderr (at most cap - 1), from the start of a line, without the trailing
// newlines. Async-signal-safe.
static inline size_t dist_link_tail(const DistLink* l, char* out, size_t cap) {
    size_t n = l->tail_total < DIST_TAIL ? l->tail_total : DIST_TAIL;
    if (n > cap - 1) n = cap - 1;
    size_t start = l->tail_total - n, skip = 0;
    for (size_t i = 0; i < n; i++) out[i] = l->tail[(start + i) % DIST_TAIL];
    if (start > 0) {  // cut mid-line: drop the partial first line when there is a later one
        while (skip < n && out[skip] != '\n') skip++;
        skip = skip < n ? skip + 1 : 0;
    }
    for (size_t i = skip; i < n; i++) out[i - skip] = out[i];
    n -= skip;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) n--;
    out[n] = '\0';
    return n;
}

// The stderr stream's write: through to fd 2 with the prefix, and into the tail.
static inline ssize_t dist_report_stderr_write(void* cookie, const char* buf, size_t n) {
    DistLink* l = (DistLink*)cookie;
    for (size_t i = 0; i < n; i++) l->tail[(l->tail_total + i) % DIST_TAIL] = buf[i];
    l->tail_total += n;
    dist_write_stderr(l->rank, buf, n, &l->line_start);
    return (ssize_t)n;
}

// An exit's message: "rank K failed: " and the tail from its last line that starts with "error" (the
// form of llmc/core/check.h's messages, with their "at" and "hint" lines), else the whole tail.
static inline void dist_report_on_exit(int status, void* arg) {
    DistLink* l = (DistLink*)arg;
    if (l->done) return;
    char msg[DIST_TAIL + 128], tail[DIST_TAIL];
    size_t n = dist_link_tail(l, tail, sizeof(tail));
    const char* from = tail;
    for (size_t i = 0; i < n; i++)
        if ((i == 0 || tail[i - 1] == '\n') && strncmp(tail + i, "error", 5) == 0) from = tail + i;
    if (strncmp(from, "error: ", 7) == 0) from += 7;
    if (status == 0)
        snprintf(msg, sizeof(msg), "rank %d exited (status 0) without closing the control channel "
                 "(dist_control_close): the others would wait for it", l->rank);
    else if (n == 0)
        snprintf(msg, sizeof(msg), "rank %d exited with status %d without a message on stderr", l->rank, status);
    else
        snprintf(msg, sizeof(msg), "rank %d failed: %s", l->rank, from);
    dist_link_send_fail(l, l->rank, msg, -1);
}

static inline void dist_report_crash(int sig) {
    int saved = errno;
    DistLink* l = dist_crash_link;
    if (l) l->crashing = 1;  // before the message: once rank 0 has it, this rank's monitor may see rank 0 go
    if (l && !l->done) {
        char msg[1280], tail[1024];  // the last 1 KB of output: an assert's message, the last log lines
        size_t n = 0;
        dist_append_safe(msg, sizeof(msg), &n, "rank ");
        dist_append_int(msg, sizeof(msg), &n, l->rank);
        dist_append_safe(msg, sizeof(msg), &n, " crashed: signal ");
        dist_append_int(msg, sizeof(msg), &n, sig);
        dist_append_safe(msg, sizeof(msg), &n, " (");
        dist_append_safe(msg, sizeof(msg), &n, dist_signal_name(sig));
        dist_append_safe(msg, sizeof(msg), &n, ")\n");
        int start = 1;
        dist_write_stderr(l->rank, msg, n, &start);  // this rank's own log says it too
        msg[--n] = '\0';
        if (dist_link_tail(l, tail, sizeof(tail)) > 0) {
            dist_append_safe(msg, sizeof(msg), &n, "; its last output:\n");
            dist_append_safe(msg, sizeof(msg), &n, tail);
        }
        dist_link_send_fail(l, l->rank, msg, -1);
        if (l->crash_delay_ns > 0) {
            struct timespec d = {l->crash_delay_ns / 1000000000L, l->crash_delay_ns % 1000000000L};
            nanosleep(&d, NULL);
        }
    }
    errno = saved;
    raise(sig);  // blocked until the handler returns, then the default action (SA_RESETHAND): core or kill
}

// Installs the stream, the exit hook and the crash handlers for link l (once per process).
static inline void dist_report_install(DistLink* l) {
    l->line_start = 1;
    cookie_io_functions_t io;
    memset(&io, 0, sizeof(io));
    io.write = dist_report_stderr_write;
    FILE* f = fopencookie(l, "w", io);
    if (f) {
        setvbuf(f, NULL, _IONBF, 0);  // unbuffered as stderr is: a line is out (and in the tail) when printed
        fflush(stderr);
        stderr = f;
    }
    on_exit(dist_report_on_exit, l);
    const char* delay = getenv("LLMC_TEST_CRASH_DELAY_MS");  // read here: a signal handler may not
    l->crash_delay_ns = delay ? atol(delay) * 1000000L : 0;
    dist_crash_link = l;
    l->alt_stack = malloc(DIST_ALT_STACK);
    if (l->alt_stack) {
        stack_t ss;
        memset(&ss, 0, sizeof(ss));
        ss.ss_sp = l->alt_stack;
        ss.ss_size = DIST_ALT_STACK;
        sigaltstack(&ss, NULL);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = dist_report_crash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaction(sigs[i], &sa, NULL);
}
