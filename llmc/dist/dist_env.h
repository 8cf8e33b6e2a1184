// dist_env.h: host-only. Who this process is in a multi-process run, read from the environment that
// its launcher set. One flavour counts, the first one present in this order:
//   torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (also ./train_gpt -gpus N, llmc/dist/launcher.h)
//   openmpi    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (mpirun of Open MPI)
//   pmi        PMI_RANK, PMI_SIZE; local rank MPI_LOCALRANKID or PMI_LOCAL_RANK, local size MPI_LOCALNRANKS
//              or PMI_LOCAL_SIZE (MPICH/Intel MPI's hydra, srun --mpi=pmi2)
//   slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, local size SLURM_NTASKS_PER_NODE when it is a
//              plain integer (srun). A batch shell with SLURM_NTASKS=1 is a run of one.
//   none       nothing of the above: rank 0 of 1.
// MASTER_ADDR and MASTER_PORT are read whatever the flavour (llmc/dist/dist_control.h uses them). Every value
// is checked: an integer, 0 <= rank < world, 0 <= local rank < local world; half a flavour (a rank
// without a size, or the reverse) is an error naming the missing variable. Plain C, no globals.
#pragma once
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIST_ERR_LEN 1024

typedef struct {
    int rank, world_size;             // 0, 1 when not launched by anything
    int local_rank, local_world_size; // on this machine; 0, 1 when unknown. A local rank without a count
                                      // (LOCAL_RANK alone): local_world_size 0
    char source[32];                  // "none" | "torchrun" | "openmpi" | "pmi" | "slurm"
    char master_addr[256];            // MASTER_ADDR, "" when not set
    int master_port;                  // MASTER_PORT, 0 when not set
} DistEnv;

// The variables of one flavour. local_rank2/local_world2 are second choices (NULL: none).
typedef struct {
    const char* source;
    const char* rank;
    const char* world;
    const char* local_rank;
    const char* local_rank2;
    const char* local_world;
    const char* local_world2;
} DistEnvFlavour;

static const DistEnvFlavour dist_env_flavours[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", NULL, "LOCAL_WORLD_SIZE", NULL},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", NULL,
     "OMPI_COMM_WORLD_LOCAL_SIZE", NULL},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "SLURM_NTASKS_PER_NODE", NULL},
};
#define DIST_ENV_FLAVOURS ((int)(sizeof(dist_env_flavours) / sizeof(dist_env_flavours[0])))

// A plain decimal integer in [lo, hi] (surrounding blanks allowed), or strict == 0 and not one: *ok 0.
// 1: *out set; 0: not set (name NULL or the variable absent); -1: present and bad, message in err.
static inline int dist_env_int(const char* name, long lo, long hi, int strict, int* out, char* err, size_t errlen) {
    const char* s = name ? getenv(name) : NULL;
    if (!s) return 0;
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
    int is_int = end != s && *s != '\0' && *end == '\0' && errno == 0;
    if (!is_int && !strict) return 0;
    if (!is_int) {
        snprintf(err, errlen, "environment variable %s=\"%s\" is not an integer; expected a number in %ld..%ld", name, s, lo, hi);
        return -1;
    }
    if (v < lo || v > hi) {
        snprintf(err, errlen, "environment variable %s=%ld is out of range; expected a number in %ld..%ld", name, v, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 1;
}

// The first of two variables that is set (either may be NULL); 0 when neither.
static inline int dist_env_int2(const char* a, const char* b, long lo, long hi, int* out, const char** used,
                                char* err, size_t errlen) {
    int got = dist_env_int(a, lo, hi, 1, out, err, errlen);
    *used = a;
    if (got != 0) return got;
    *used = b;
    return dist_env_int(b, lo, hi, 1, out, err, errlen);
}

// Is the flavour present at all? Slurm counts only when it names a rank and a task count (srun sets
// both; a batch shell of one task is a run of one, see below).
static inline int dist_env_present(const DistEnvFlavour* f) {
    if (strcmp(f->source, "slurm") == 0) return getenv(f->world) != NULL;
    return getenv(f->rank) != NULL || getenv(f->world) != NULL;
}

// Rank, world, local rank and local world of flavour f into e. 0, or -1 with a message in err.
static inline int dist_env_read_flavour(DistEnv* e, const DistEnvFlavour* f, char* err, size_t errlen) {
    int has_rank = dist_env_int(f->rank, 0, INT_MAX, 1, &e->rank, err, errlen);
    if (has_rank < 0) return -1;
    int has_world = dist_env_int(f->world, 1, INT_MAX, 1, &e->world_size, err, errlen);
    if (has_world < 0) return -1;
    int is_slurm = strcmp(f->source, "slurm") == 0;
    if (is_slurm && !has_rank && e->world_size == 1) { e->rank = 0; has_rank = 1; }  // sbatch shell, one task
    if (!has_rank || !has_world) {
        const char* missing = has_rank ? f->world : f->rank;
        const char* present = has_rank ? f->rank : f->world;
        snprintf(err, errlen, "%s is set but %s is not: a %s launch sets both (unset %s to run as a single process)",
                 present, missing, f->source, present);
        return -1;
    }
    if (e->rank >= e->world_size) {
        snprintf(err, errlen, "%s=%d is not below %s=%d; expected 0 <= %s < %s", f->rank, e->rank, f->world,
                 e->world_size, f->rank, f->world);
        return -1;
    }
    const char *lr_name, *lw_name;
    int has_lr = dist_env_int2(f->local_rank, f->local_rank2, 0, INT_MAX, &e->local_rank, &lr_name, err, errlen);
    if (has_lr < 0) return -1;
    // Slurm's per-node count may be a list ("2,1", "4(x2)"): only a plain integer is used
    int has_lw = is_slurm ? dist_env_int(f->local_world, 1, INT_MAX, 0, &e->local_world_size, err, errlen)
                          : dist_env_int2(f->local_world, f->local_world2, 1, INT_MAX, &e->local_world_size, &lw_name, err, errlen);
    if (is_slurm) lw_name = f->local_world;
    if (has_lw < 0) return -1;
    if (!has_lr && has_lw) {
        snprintf(err, errlen, "%s is set but %s is not: a %s launch that gives the local count also gives the local rank",
                 lw_name, f->local_rank, f->source);
        return -1;
    }
    if (!has_lr) { e->local_rank = 0; e->local_world_size = 1; return 0; }
    if (!has_lw) { e->local_world_size = 0; return 0; }
    if (e->local_rank >= e->local_world_size) {
        snprintf(err, errlen, "%s=%d is not below %s=%d; expected 0 <= %s < %s", lr_name, e->local_rank, lw_name,
                 e->local_world_size, lr_name, lw_name);
        return -1;
    }
    if (e->local_world_size > e->world_size) {
        snprintf(err, errlen, "%s=%d is larger than %s=%d; expected at most as many ranks on this machine as in the run",
                 lw_name, e->local_world_size, f->world, e->world_size);
        return -1;
    }
    return 0;
}

// Reads the environment. Returns 0, or -1 with a message in err naming the variable and what was expected.
static inline int dist_env_detect(DistEnv* e, char* err, size_t errlen) {
    memset(e, 0, sizeof(*e));
    e->world_size = 1;
    e->local_world_size = 1;
    snprintf(e->source, sizeof(e->source), "none");
    for (int i = 0; i < DIST_ENV_FLAVOURS; i++) {
        const DistEnvFlavour* f = &dist_env_flavours[i];
        if (!dist_env_present(f)) continue;
        if (dist_env_read_flavour(e, f, err, errlen) != 0) return -1;
        snprintf(e->source, sizeof(e->source), "%s", f->source);
        break;
    }
    const char* addr = getenv("MASTER_ADDR");
    if (addr && strlen(addr) >= sizeof(e->master_addr)) {
        snprintf(err, errlen, "environment variable MASTER_ADDR is %zu characters long; expected a host name or "
                 "address of at most %zu", strlen(addr), sizeof(e->master_addr) - 1);
        return -1;
    }
    snprintf(e->master_addr, sizeof(e->master_addr), "%s", addr ? addr : "");
    if (dist_env_int("MASTER_PORT", 1, 65535, 1, &e->master_port, err, errlen) < 0) return -1;
    return 0;
}
