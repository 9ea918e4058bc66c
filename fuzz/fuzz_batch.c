/* Fuzz target: the batch file `segtrain grad` reads, through `segtrain grad` itself (cmd_grad, as the command line
 * calls it), so that the reader under test is the CLI's own (src/cli/cmd_model.c), not a copy. The model is dit-tiny
 * with seeded random weights written once by `segtrain init`; the device and host budgets are 64 MiB, so that a
 * batch claiming a huge size is an out-of-memory status, never a huge allocation. A batch that reads well runs one
 * forward and backward and writes its gradients, as grad does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fuzz_files.h"
#include "segtrain/ops.h"

static char config_path[512], weights_path[512], batch_path[512], out_path[512];
static char budget[] = "device_memory=64MiB", host_budget[] = "host_memory=64MiB";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ops_set_threads(1); /* one core per fuzzer: the machine is shared */
    if (!freopen("/dev/null", "w", stdout)) abort(); /* grad's report; its errors still go to stderr */
    snprintf(config_path, sizeof config_path, "%s", fuzz_write("config.json", "{\"model_preset\": \"dit-tiny\"}", 28));
    snprintf(weights_path, sizeof weights_path, "%s", fuzz_path("weights.safetensors"));
    snprintf(batch_path, sizeof batch_path, "%s", fuzz_path("batch.safetensors"));
    snprintf(out_path, sizeof out_path, "%s", fuzz_path("grads.safetensors"));
    char *init[] = {"init", "--config", config_path, "--out", weights_path, "--random", NULL};
    if (cmd_init(6, init) != 0) {
        fprintf(stderr, "fuzz_batch: segtrain init failed\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("batch.safetensors", data, size);
    char *grad[] = {"grad", "--config", config_path, "--weights", weights_path, "--batch", batch_path, "--out", out_path,
                    "--set", budget, "--set", host_budget, NULL};
    int rc = cmd_grad(13, grad);
    if (rc != 0 && rc != 1) { /* 2 is bad usage: the harness's fault */
        fprintf(stderr, "fuzz_batch: segtrain grad exited %d\n", rc);
        abort();
    }
    return 0;
}
