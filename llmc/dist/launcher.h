// launcher.h: host-only. `./train_gpt -gpus N` on one machine: this process becomes a launcher that runs
// N copies of itself, one per GPU, the way torchrun would:
//   - each copy is /proc/self/exe with the same arguments minus "-gpus N", and in its environment RANK,
//     WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a port free now:
//     the kernel's pick for port 0); every other variable as it is here (NCCL_* too: never set here);
//   - each copy gets SIGTERM if the launcher dies (PR_SET_PDEATHSIG), so none is left running alone;
//   - SIGINT and SIGTERM to the launcher reach every copy as SIGTERM, once (they checkpoint and exit);
//     each copy is in a process group of its own, so a terminal's Ctrl-C reaches the launcher alone;
//   - once one copy fails (non-zero status or a signal), the others have grace_s seconds to exit on
//     their own (llmc/dist/dist_control.h makes them exit with its message), then get SIGKILL.
// The launcher prints one line per failed copy and returns main's exit code: 0 when all succeeded, else 1.
// Call it from the main thread, before any other thread starts (PR_SET_PDEATHSIG follows the thread).
#pragma once
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include "dist_socket.h"

extern char** environ;

// The environment of rank `rank` of n: this process's, without the six variables set here, then those.
// NULL when out of memory. Free with launch_free_env.
static inline char** launch_child_env(int rank, int n, int port) {
    static const char* const own[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
    const int n_own = (int)(sizeof(own) / sizeof(own[0]));
    int count = 0;
    while (environ[count]) count++;
    char** env = (char**)calloc((size_t)(count + n_own + 1), sizeof(char*));
    if (!env) return NULL;
    int m = 0;
    for (int i = 0; i < count; i++) {
        int ours = 0;
        for (int j = 0; j < n_own; j++) ours |= strncmp(environ[i], own[j], strlen(own[j])) == 0;
        if (!ours) env[m++] = environ[i];
    }
    int values[] = {rank, n, rank, n, -1, port};
    for (int j = 0; j < n_own; j++) {
        char buf[64];
        if (values[j] < 0) snprintf(buf, sizeof(buf), "%s127.0.0.1", own[j]);
        else snprintf(buf, sizeof(buf), "%s%d", own[j], values[j]);
        if (!(env[m++] = strdup(buf))) {  // these are the last n_own entries: launch_free_env frees them
            for (int k = m - 1 - j; k < m; k++) free(env[k]);
            free(env);
            return NULL;
        }
    }
    return env;
}

static inline void launch_free_env(char** env) {
    if (!env) return;
    int count = 0;
    while (env[count]) count++;
    for (int i = count - 6 > 0 ? count - 6 : 0; i < count; i++) free(env[i]);
    free(env);
}

// One line for a copy that failed: "rank K exited with status S" / "rank K killed by signal N (NAME)".
static inline void launch_report(int rank, int status, int killed_here, double grace_s) {
    if (WIFEXITED(status)) {
        fprintf(stderr, "error: rank %d exited with status %d\n", rank, WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        fprintf(stderr, "error: rank %d killed by signal %d (%s)%s", rank, sig, dist_signal_name(sig),
                killed_here ? "" : "\n");
        if (killed_here) fprintf(stderr, ": still running %g s after another rank failed\n", grace_s);
    }
}

// Runs n copies of this program (argv without argv[argv_skip], "-gpus", and argv[argv_skip + 1], its N)
// and waits for all of them. Returns the exit code for main: 0 when all exited 0, else 1.
static inline int launch_local(int n, int argc, char** argv, int argv_skip, double grace_s) {
    if (argv_skip < 0 || argv_skip + 1 >= argc) {
        fprintf(stderr, "error: -gpus is not followed by a number of processes (it is argument %d of %d)\n", argv_skip, argc);
        return 1;
    }
    if (n < 1) {
        fprintf(stderr, "error: -gpus %d: expected the number of processes to run, one per GPU, at least 1\n", n);
        return 1;
    }
    int port = dist_free_port();
    if (port < 0) {
        fprintf(stderr, "error: -gpus: no free TCP port on 127.0.0.1 for the ranks to meet on (%s)\n", strerror(errno));
        return 1;
    }
    char** child_argv = (char**)calloc((size_t)argc, sizeof(char*));
    char*** envs = (char***)calloc((size_t)n, sizeof(char**));
    pid_t* pids = (pid_t*)calloc((size_t)n, sizeof(pid_t));
    char* killed = (char*)calloc((size_t)n, 1);  // 1: got SIGKILL from here
    int ok = child_argv && envs && pids && killed;
    for (int i = 0, m = 0; ok && i < argc; i++)
        if (i != argv_skip && i != argv_skip + 1) child_argv[m++] = argv[i];
    for (int r = 0; ok && r < n; r++) ok = (envs[r] = launch_child_env(r, n, port)) != NULL;
    // SIGINT/SIGTERM/SIGCHLD are taken with sigtimedwait below: blocked from before the first fork, so
    // that none is lost; the copies get the mask back before exec.
    sigset_t waited, old;
    sigemptyset(&waited);
    sigaddset(&waited, SIGINT);
    sigaddset(&waited, SIGTERM);
    sigaddset(&waited, SIGCHLD);
    sigprocmask(SIG_BLOCK, &waited, &old);
    pid_t self = getpid();
    int started = 0, failed = !ok, live = 0;
    if (!ok) fprintf(stderr, "error: -gpus: out of host memory to start %d ranks\n", n);
    for (; ok && started < n; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            // a process group of its own: a terminal's Ctrl-C reaches the launcher alone, which forwards
            // one SIGTERM; a copy that got both would take the second as "stop now", without a checkpoint
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != self) _exit(1);  // the launcher died before prctl took effect
            sigprocmask(SIG_SETMASK, &old, NULL);
            execve("/proc/self/exe", child_argv, envs[started]);
            const char msg[] = "error: -gpus: cannot run /proc/self/exe again (execve failed)\n";
            if (write(2, msg, sizeof(msg) - 1) < 0) {}
            _exit(127);  // a forked copy of the launcher: _exit runs none of its exit hooks or stdio flushes again
        }
        if (pid < 0) {
            fprintf(stderr, "error: -gpus: cannot start rank %d (fork: %s); stopping the others\n", started, strerror(errno));
            failed = 1;
            for (int r = 0; r < started; r++) kill(pids[r], SIGTERM);
            break;
        }
        pids[started] = pid;
        live++;
    }
    double kill_at = failed && live ? dist_now() + grace_s : 0;  // 0: no deadline yet; -1: SIGKILL sent
    while (live > 0) {
        for (int r = 0; r < started; r++) {
            int status = 0;
            if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
            pids[r] = 0;
            live--;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
            launch_report(r, status, killed[r], grace_s);
            failed = 1;
            if (kill_at == 0) kill_at = dist_now() + grace_s;
        }
        if (live == 0) break;
        if (kill_at > 0 && dist_now() >= kill_at) {
            for (int r = 0; r < started; r++)
                if (pids[r] > 0) { kill(pids[r], SIGKILL); killed[r] = 1; }
            kill_at = -1;
        }
        double wait_s = kill_at > 0 ? kill_at - dist_now() : 1.0;
        if (wait_s > 1.0) wait_s = 1.0;  // SIGCHLD is never lost (blocked), but look again now and then anyway
        if (wait_s < 0.0) wait_s = 0.0;
        struct timespec ts;
        ts.tv_sec = (time_t)wait_s;
        ts.tv_nsec = (long)((wait_s - (double)ts.tv_sec) * 1e9);
        int sig = sigtimedwait(&waited, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "launcher: %s: sending SIGTERM to every rank\n", dist_signal_name(sig));
            for (int r = 0; r < started; r++)
                if (pids[r] > 0) kill(pids[r], SIGTERM);
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    for (int r = 0; envs && r < n; r++) launch_free_env(envs[r]);
    free(envs);
    free(child_argv);
    free(pids);
    free(killed);
    return failed ? 1 : 0;
}
