// dist_socket.h: host-only. The POSIX plumbing under llmc/dist/dist_control.h and llmc/dist/launcher.h: a clock,
// signal names, string helpers, and IPv4 TCP with a deadline on every wait (listen, connect, whole sends and receives)
// and framed messages: a type byte, a uint32 payload length (big-endian), the payload. Sends use
// MSG_NOSIGNAL (a closed peer is an error, not SIGPIPE); every wait retries on EINTR. The functions
// used on crash paths (dist_now, dist_send_all, dist_msg_send) call only async-signal-safe functions.
#pragma once
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DIST_MSG_HEADER 5      // type byte + uint32 length
#define DIST_MSG_MAX    8192   // the largest payload of a control message (a broadcast blob may be larger)

// Appends to the string in buf (cap bytes in all), cutting what does not fit.
static inline void dist_appendf(char* buf, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void dist_appendf(char* buf, size_t cap, const char* fmt, ...) {
    size_t len = strnlen(buf, cap);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

// src into dst (cap bytes), cut to fit.
static inline void dist_copy_str(char* dst, size_t cap, const char* src) {
    if (cap == 0) return;
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

// Seconds on the monotonic clock: the deadlines here, the NCCL waits' timeouts (llmc/dist/comm_nccl.cuh) and
// train_gpt's timings.
static inline double dist_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Milliseconds left until deadline, for poll(); at least 0, at most a minute per call.
static inline int dist_ms_left(double deadline) {
    double ms = (deadline - dist_now()) * 1000.0;
    return ms <= 0 ? 0 : ms > 60000 ? 60000 : (int)ms + 1;
}

static inline void dist_sleep(double s) {
    struct timespec t;
    t.tv_sec = (time_t)s;
    t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

// "SIGSEGV" etc. for the signals a process usually dies of; "an unnamed signal" otherwise.
static inline const char* dist_signal_name(int sig) {
    switch (sig) {
        case SIGHUP: return "SIGHUP";   case SIGINT: return "SIGINT";   case SIGQUIT: return "SIGQUIT";
        case SIGILL: return "SIGILL";   case SIGTRAP: return "SIGTRAP"; case SIGABRT: return "SIGABRT";
        case SIGBUS: return "SIGBUS";   case SIGFPE: return "SIGFPE";   case SIGKILL: return "SIGKILL";
        case SIGUSR1: return "SIGUSR1"; case SIGSEGV: return "SIGSEGV"; case SIGUSR2: return "SIGUSR2";
        case SIGPIPE: return "SIGPIPE"; case SIGALRM: return "SIGALRM"; case SIGTERM: return "SIGTERM";
        case SIGXCPU: return "SIGXCPU"; case SIGXFSZ: return "SIGXFSZ";
        default: return "an unnamed signal";
    }
}

// Waits for fd to become ready for `events`. 1 ready (or hung up/error: the next call says which), 0 timeout.
static inline int dist_wait_fd(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p;
        p.fd = fd; p.events = events; p.revents = 0;
        int r = poll(&p, 1, dist_ms_left(deadline));
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return 1;  // let the read or write report the error
        if (r == 0 && dist_now() >= deadline) return 0;
    }
}

// All len bytes, or -1 with errno (ETIMEDOUT at the deadline, EPIPE/ECONNRESET when the peer is gone).
static inline int dist_send_all(int fd, const void* buf, size_t len, double deadline) {
    const char* p = (const char*)buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) { p += n; len -= (size_t)n; continue; }
        if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (n < 0 && errno == EINTR) continue;
        if (!dist_wait_fd(fd, POLLOUT, deadline)) { errno = ETIMEDOUT; return -1; }
    }
    return 0;
}

// All len bytes: 1; the peer closed the connection first: 0; -1 with errno (ETIMEDOUT at the deadline).
static inline int dist_recv_all(int fd, void* buf, size_t len, double deadline) {
    char* p = (char*)buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) { p += n; len -= (size_t)n; continue; }
        if (n == 0) return 0;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return errno == ECONNRESET ? 0 : -1;
        if (!dist_wait_fd(fd, POLLIN, deadline)) { errno = ETIMEDOUT; return -1; }
    }
    return 1;
}

static inline void dist_put_u32(unsigned char* p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}
static inline uint32_t dist_get_u32(const unsigned char* p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

// One message whose payload is head (head_len bytes) followed by text (text_len bytes), sent with one
// send() where it fits, so that messages from two threads do not interleave. 0, or -1 with errno.
static inline int dist_msg_send(int fd, int type, const void* head, size_t head_len, const void* text,
                                size_t text_len, double deadline) {
    unsigned char buf[DIST_MSG_HEADER + 64 + DIST_MSG_MAX];
    size_t len = head_len + text_len;
    buf[0] = (unsigned char)type;
    dist_put_u32(buf + 1, (uint32_t)len);
    if (head_len <= 64 && len <= DIST_MSG_MAX + 64) {
        if (head_len) memcpy(buf + DIST_MSG_HEADER, head, head_len);
        if (text_len) memcpy(buf + DIST_MSG_HEADER + head_len, text, text_len);
        return dist_send_all(fd, buf, DIST_MSG_HEADER + len, deadline);
    }
    if (dist_send_all(fd, buf, DIST_MSG_HEADER, deadline) != 0) return -1;
    if (head_len && dist_send_all(fd, head, head_len, deadline) != 0) return -1;
    return text_len ? dist_send_all(fd, text, text_len, deadline) : 0;
}

// A message's type and payload length: 1; the peer closed first: 0; -1 with errno.
static inline int dist_msg_recv_header(int fd, int* type, uint32_t* len, double deadline) {
    unsigned char h[DIST_MSG_HEADER];
    int r = dist_recv_all(fd, h, sizeof(h), deadline);
    if (r != 1) return r;
    *type = h[0];
    *len = dist_get_u32(h + 1);
    return 1;
}

// Options of every control connection: no Nagle delay for the small messages, and keepalive probes so
// that a machine that loses power is noticed (after about 25 s) instead of waited for forever.
static inline void dist_socket_options(int fd) {
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

// A socket listening on every IPv4 address at `port` (0: a free one, its number in *bound).
// The fd, or -1 with errno.
static inline int dist_listen(int port, int* bound) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    socklen_t alen = sizeof(a);
    if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr*)&a, &alen) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (bound) *bound = ntohs(a.sin_port);
    return fd;
}

// A port that is free on 127.0.0.1 now (the kernel's pick for port 0), or -1 with errno.
static inline int dist_free_port(void) {
    int port = -1;
    int fd = dist_listen(0, &port);
    if (fd < 0) return -1;
    close(fd);
    return port;
}

// One connection attempt to host:port (a name or a dotted address, resolved to IPv4), waiting at most
// until deadline. The fd; or -1 with *gai set (a getaddrinfo error, 0 when resolving worked) or errno.
static inline int dist_connect(const char* host, int port, double deadline, int* gai) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    *gai = getaddrinfo(host, service, &hints, &res);
    if (*gai != 0) return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) { freeaddrinfo(res); return -1; }
    int r = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (r != 0 && errno == EINPROGRESS) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (!dist_wait_fd(fd, POLLOUT, deadline)) err = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        r = err ? -1 : 0;
        errno = err;
    }
    if (r != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    dist_socket_options(fd);
    return fd;
}

// An IPv4 address of this machine that other machines can likely reach: the host name's address, else
// the first non-loopback interface that is up, else 127.0.0.1. (MASTER_ADDR overrides it, see dist_control.h.)
static inline void dist_host_address(char* out, size_t n) {
    snprintf(out, n, "127.0.0.1");
    char name[256];
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    name[sizeof(name) - 1] = '\0';  // gethostname need not terminate a name it cut
    if (gethostname(name, sizeof(name) - 1) == 0 && getaddrinfo(name, NULL, &hints, &res) == 0) {
        for (struct addrinfo* r = res; r; r = r->ai_next) {
            struct in_addr ia = ((struct sockaddr_in*)r->ai_addr)->sin_addr;
            if ((ntohl(ia.s_addr) >> 24) == 127) continue;
            inet_ntop(AF_INET, &ia, out, (socklen_t)n);
            freeaddrinfo(res);
            return;
        }
        freeaddrinfo(res);
    }
    struct ifaddrs* ifs = NULL;
    if (getifaddrs(&ifs) != 0) return;
    for (struct ifaddrs* i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
        inet_ntop(AF_INET, &((struct sockaddr_in*)i->ifa_addr)->sin_addr, out, (socklen_t)n);
        break;
    }
    freeifaddrs(ifs);
}
