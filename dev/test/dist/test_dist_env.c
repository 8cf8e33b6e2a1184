// test_dist_env.c: CPU tests of rank detection from the environment (llmc/dist/dist_env.h).
// Checks: nothing set is rank 0 of 1 ("none"); each flavour (torchrun, Open MPI, PMI with either local
// rank variable, Slurm with and without a plain per-node count) gives its rank, world, local rank and
// local world; the precedence torchrun > Open MPI > PMI > Slurm when several are set; Slurm's batch
// shell of one task is a run of one, and SLURM_PROCID alone is ignored; MASTER_ADDR and MASTER_PORT
// are read with every flavour. Every bad case fails with a message naming the variable: not an integer,
// out of range, rank >= world, local rank >= local world, local world > world, half a flavour (rank
// without size, size without rank, local size without local rank), MASTER_PORT out of 1..65535, a
// MASTER_ADDR too long.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../../llmc/dist/dist_env.h"
#include "../testing.h"

// every variable dist_env.h reads, unset before each case
static const char* const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "MASTER_ADDR", "MASTER_PORT",
};

// Sets exactly the variables in `assignments` ("NAME=value" each, NULL-terminated) after unsetting all.
static void env_set(const char* const* assignments) {
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++) unsetenv(all_vars[i]);
    for (int i = 0; assignments && assignments[i]; i++) {
        char name[64];
        const char* eq = strchr(assignments[i], '=');
        snprintf(name, sizeof(name), "%.*s", (int)(eq - assignments[i]), assignments[i]);
        setenv(name, eq + 1, 1);
    }
}

// Detection must succeed with these values.
static void expect_env(const char* what, const char* const* assignments, const char* source, int rank, int world,
                       int local_rank, int local_world) {
    env_set(assignments);
    DistEnv e;
    char err[DIST_ERR_LEN] = "";
    int rc = dist_env_detect(&e, err, sizeof(err));
    EXPECT(rc == 0, "%s: dist_env_detect failed: %s", what, err);
    if (rc != 0) return;
    EXPECT(strcmp(e.source, source) == 0 && e.rank == rank && e.world_size == world && e.local_rank == local_rank &&
           e.local_world_size == local_world,
           "%s: got %s rank %d/%d local %d/%d, expected %s rank %d/%d local %d/%d", what, e.source, e.rank, e.world_size,
           e.local_rank, e.local_world_size, source, rank, world, local_rank, local_world);
}

// Detection must fail with a message that contains each of the NULL-terminated strings in `wants`.
static void expect_error(const char* what, const char* const* assignments, const char* const* wants) {
    env_set(assignments);
    DistEnv e;
    char err[DIST_ERR_LEN] = "";
    int rc = dist_env_detect(&e, err, sizeof(err));
    EXPECT(rc == -1, "%s: dist_env_detect accepted it (rank %d/%d)", what, e.rank, e.world_size);
    for (int i = 0; rc == -1 && wants[i]; i++)
        EXPECT(strstr(err, wants[i]) != NULL, "%s: the message \"%s\" lacks \"%s\"", what, err, wants[i]);
}

#define VARS(...) ((const char* const[]){__VA_ARGS__, NULL})

int main(void) {
    // --- flavours ---
    expect_env("nothing set", NULL, "none", 0, 1, 0, 1);
    expect_env("torchrun", VARS("RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2"), "torchrun", 3, 8, 1, 2);
    expect_env("torchrun without local", VARS("RANK=5", "WORLD_SIZE=6"), "torchrun", 5, 6, 0, 1);
    expect_env("torchrun local rank only", VARS("RANK=5", "WORLD_SIZE=6", "LOCAL_RANK=1"), "torchrun", 5, 6, 1, 0);
    expect_env("torchrun, blanks", VARS("RANK= 2 ", "WORLD_SIZE=4\n"), "torchrun", 2, 4, 0, 1);
    expect_env("openmpi", VARS("OMPI_COMM_WORLD_RANK=6", "OMPI_COMM_WORLD_SIZE=16", "OMPI_COMM_WORLD_LOCAL_RANK=6",
                               "OMPI_COMM_WORLD_LOCAL_SIZE=8"), "openmpi", 6, 16, 6, 8);
    expect_env("pmi, MPI_LOCALRANKID", VARS("PMI_RANK=1", "PMI_SIZE=4", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2"),
               "pmi", 1, 4, 1, 2);
    expect_env("pmi, PMI_LOCAL_RANK", VARS("PMI_RANK=3", "PMI_SIZE=4", "PMI_LOCAL_RANK=1", "PMI_LOCAL_SIZE=2"),
               "pmi", 3, 4, 1, 2);
    expect_env("pmi without local", VARS("PMI_RANK=3", "PMI_SIZE=4"), "pmi", 3, 4, 0, 1);
    expect_env("slurm", VARS("SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1", "SLURM_NTASKS_PER_NODE=4"),
               "slurm", 5, 8, 1, 4);
    expect_env("slurm, per-node count a list", VARS("SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1",
                                                    "SLURM_NTASKS_PER_NODE=4(x2)"), "slurm", 5, 8, 1, 0);
    expect_env("slurm batch shell", VARS("SLURM_NTASKS=1"), "slurm", 0, 1, 0, 1);
    expect_env("slurm one task", VARS("SLURM_PROCID=0", "SLURM_NTASKS=1"), "slurm", 0, 1, 0, 1);
    expect_env("SLURM_PROCID alone", VARS("SLURM_PROCID=3"), "none", 0, 1, 0, 1);
    // --- precedence ---
    expect_env("torchrun over openmpi", VARS("RANK=1", "WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4"),
               "torchrun", 1, 2, 0, 1);
    expect_env("openmpi over pmi and slurm", VARS("OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "PMI_RANK=1",
                                                  "PMI_SIZE=2", "SLURM_PROCID=0", "SLURM_NTASKS=2"), "openmpi", 3, 4, 0, 1);
    expect_env("pmi over slurm", VARS("PMI_RANK=1", "PMI_SIZE=2", "SLURM_PROCID=5", "SLURM_NTASKS=8"), "pmi", 1, 2, 0, 1);
    expect_env("a bad lower flavour is not read", VARS("RANK=0", "WORLD_SIZE=1", "SLURM_PROCID=x", "SLURM_NTASKS=2"),
               "torchrun", 0, 1, 0, 1);
    // --- MASTER_ADDR, MASTER_PORT ---
    env_set(VARS("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=node07.cluster", "MASTER_PORT=29501"));
    DistEnv e;
    char err[DIST_ERR_LEN] = "";
    EXPECT(dist_env_detect(&e, err, sizeof(err)) == 0 && strcmp(e.master_addr, "node07.cluster") == 0 &&
           e.master_port == 29501, "MASTER_ADDR/PORT with openmpi: %s, got \"%s\" %d", err, e.master_addr, e.master_port);
    env_set(NULL);
    EXPECT(dist_env_detect(&e, err, sizeof(err)) == 0 && e.master_addr[0] == '\0' && e.master_port == 0,
           "MASTER_ADDR/PORT unset: got \"%s\" %d", e.master_addr, e.master_port);
    // --- bad cases, each naming the variable ---
    expect_error("RANK not a number", VARS("RANK=one", "WORLD_SIZE=2"), VARS("RANK", "\"one\"", "not an integer"));
    expect_error("WORLD_SIZE empty", VARS("RANK=0", "WORLD_SIZE="), VARS("WORLD_SIZE", "not an integer"));
    expect_error("WORLD_SIZE trailing junk", VARS("RANK=0", "WORLD_SIZE=4x"), VARS("WORLD_SIZE", "4x"));
    expect_error("WORLD_SIZE 0", VARS("RANK=0", "WORLD_SIZE=0"), VARS("WORLD_SIZE=0", "out of range"));
    expect_error("WORLD_SIZE huge", VARS("RANK=0", "WORLD_SIZE=99999999999"), VARS("WORLD_SIZE", "out of range"));
    expect_error("RANK negative", VARS("RANK=-1", "WORLD_SIZE=2"), VARS("RANK=-1", "out of range"));
    expect_error("RANK >= WORLD_SIZE", VARS("RANK=4", "WORLD_SIZE=4"), VARS("RANK=4", "WORLD_SIZE=4", "0 <= RANK < WORLD_SIZE"));
    expect_error("RANK without WORLD_SIZE", VARS("RANK=1"), VARS("RANK is set but WORLD_SIZE is not"));
    expect_error("WORLD_SIZE without RANK", VARS("WORLD_SIZE=2"), VARS("WORLD_SIZE is set but RANK is not"));
    expect_error("LOCAL_RANK >= LOCAL_WORLD_SIZE", VARS("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"),
                 VARS("LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"));
    expect_error("LOCAL_WORLD_SIZE > WORLD_SIZE", VARS("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4"),
                 VARS("LOCAL_WORLD_SIZE=4", "WORLD_SIZE=2"));
    expect_error("LOCAL_WORLD_SIZE without LOCAL_RANK", VARS("RANK=1", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2"),
                 VARS("LOCAL_WORLD_SIZE is set but LOCAL_RANK is not"));
    expect_error("LOCAL_RANK bad", VARS("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=a"), VARS("LOCAL_RANK", "not an integer"));
    expect_error("OMPI rank without size", VARS("OMPI_COMM_WORLD_RANK=0"),
                 VARS("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"));
    expect_error("OMPI rank >= size", VARS("OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"),
                 VARS("OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"));
    expect_error("PMI size without rank", VARS("PMI_SIZE=4"), VARS("PMI_SIZE is set but PMI_RANK is not"));
    expect_error("PMI_LOCAL_RANK bad", VARS("PMI_RANK=0", "PMI_SIZE=4", "PMI_LOCAL_RANK=-2"), VARS("PMI_LOCAL_RANK", "out of range"));
    expect_error("SLURM_NTASKS > 1 without SLURM_PROCID", VARS("SLURM_NTASKS=4"), VARS("SLURM_NTASKS is set but SLURM_PROCID is not"));
    expect_error("SLURM_PROCID >= SLURM_NTASKS", VARS("SLURM_PROCID=4", "SLURM_NTASKS=4"), VARS("SLURM_PROCID=4", "SLURM_NTASKS=4"));
    expect_error("SLURM_LOCALID >= per node", VARS("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=2", "SLURM_NTASKS_PER_NODE=2"),
                 VARS("SLURM_LOCALID=2", "SLURM_NTASKS_PER_NODE=2"));
    expect_error("MASTER_PORT 0", VARS("MASTER_PORT=0"), VARS("MASTER_PORT=0", "1..65535"));
    expect_error("MASTER_PORT 65536", VARS("RANK=0", "WORLD_SIZE=2", "MASTER_PORT=65536"), VARS("MASTER_PORT=65536", "1..65535"));
    expect_error("MASTER_PORT not a number", VARS("MASTER_PORT=http"), VARS("MASTER_PORT", "not an integer"));
    char long_addr[400];
    memset(long_addr, 'a', sizeof(long_addr) - 1);
    long_addr[sizeof(long_addr) - 1] = '\0';
    env_set(NULL);
    setenv("MASTER_ADDR", long_addr, 1);
    EXPECT(dist_env_detect(&e, err, sizeof(err)) == -1 && strstr(err, "MASTER_ADDR") != NULL,
           "a 399-character MASTER_ADDR: %s", err);
    env_set(NULL);
    return test_summary("test_dist_env");
}
