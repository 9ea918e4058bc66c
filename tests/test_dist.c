/* Data-parallel training as users run it: `mpirun -np 2 segtrain train` against one process with the global
 * batch, twice for repeatability, and with a rank killed mid-run. Skipped (exit 77, a visible reason) in a build
 * without MPI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "segtrain/dist.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

static char dir[256];

static int run(const char *cmd)
{
    char line[2048];
    snprintf(line, sizeof line, "cd %s && %s > out.txt 2>&1", dir, cmd);
    const int rc = system(line);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void show_output(void)
{
    char line[512];
    snprintf(line, sizeof line, "tail -5 %s/out.txt", dir);
    if (system(line)) printf("     (no output)\n");
}

#define MPIRUN "mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 "
#define TRAIN " --threads 1 train --config c.json --set max_train_steps=3 --set checkpoint_step_interval=2 "

/* The largest relative L2 difference over the tensors of two weight files (or INFINITY when they differ in names
 * or shapes), and whether they are byte for byte the same tensors. */
static double compare(const char *a_name, const char *b_name, bool *same_bits)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a_name);
    snprintf(pb, sizeof pb, "%s/%s", dir, b_name);
    sft_file *a = NULL, *b = NULL;
    double worst = INFINITY;
    *same_bits = false;
    if (sft_open(pa, &a) || sft_open(pb, &b) || sft_count(a) != sft_count(b)) goto done;
    worst = 0;
    *same_bits = true;
    for (int i = 0; i < sft_count(a); i++) {
        const sft_tensor *ta = sft_at(a, i), *tb = sft_find(b, ta->name);
        if (!tb || tb->nbytes != ta->nbytes || ta->dtype != SFT_F32) {
            worst = INFINITY;
            break;
        }
        *same_bits &= !memcmp(ta->data, tb->data, ta->nbytes);
        double diff = 0, norm = 0;
        for (size_t k = 0; k < ta->nbytes / 4; k++) {
            float x, y;
            memcpy(&x, (const char *)ta->data + 4 * k, 4);
            memcpy(&y, (const char *)tb->data + 4 * k, 4);
            diff += ((double)x - y) * ((double)x - y), norm += (double)y * y;
        }
        const double rel = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
        if (rel > worst) worst = rel;
        if (rel > 1e-6) printf("     %s: relative L2 %.3g\n", ta->name, rel);
    }
done:
    sft_close(a);
    sft_close(b);
    return worst;
}

int main(void)
{
    if (!dist_built()) {
        printf("SKIP: this build has no MPI (install libopenmpi-dev and openmpi-bin: scripts/install-deps.sh)\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/segtrain-dist-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/c.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"model_preset\": \"dit-tiny\", \"in_channels\": 3, \"vae_scale_factor\": 1, \"resolution\": 8,"
          " \"num_classes\": 8, \"synthetic_data\": true, \"validation_steps\": 0, \"learning_rate\": 1e-3,"
          " \"seed\": 11}\n", f);
    fclose(f);

    /* two ranks of batch 2 against one process of batch 4: the same samples, the same step */
    int rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=two");
    CHECKF(rc == 0, "mpirun -np 2 segtrain train exited %d", rc);
    if (rc) show_output();
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=again");
    CHECKF(rc == 0, "the second 2-rank run exited %d", rc);
    rc = run(SEGTRAIN_BIN TRAIN "--set train_batch_size=4 --set output_dir=one");
    CHECKF(rc == 0, "one process of batch 4 exited %d", rc);
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=two1 --set max_train_steps=1");
    rc |= run(SEGTRAIN_BIN TRAIN "--set train_batch_size=4 --set output_dir=one1 --set max_train_steps=1");
    CHECKF(rc == 0, "the one-step runs exited %d", rc);
    bool same;
    double worst = compare("two1/model.safetensors", "one1/model.safetensors", &same);
    CHECKF(worst <= 1e-6, "2 ranks x batch 2 against 1 x batch 4, one AdamW step: relative L2 %.3g (at most 1e-6)",
           worst);
    printf("     2 ranks x batch 2 against 1 process x batch 4, one AdamW step: worst relative L2 %.3g\n", worst);
    worst = compare("two/model.safetensors", "one/model.safetensors", &same);
    printf("     and after 3 steps: %.3g\n", worst);
    /* a loader (the built-in dataset): each rank reads its share of the global batch, the same samples */
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=data2 --set max_train_steps=1 "
                    "--set synthetic_data=false");
    rc |= run(SEGTRAIN_BIN TRAIN "--set train_batch_size=4 --set output_dir=data1 --set max_train_steps=1 "
                                 "--set synthetic_data=false");
    worst = compare("data2/model.safetensors", "data1/model.safetensors", &same);
    CHECKF(rc == 0 && worst <= 1e-6, "on the built-in dataset, 2 ranks x 2 against 1 x 4: relative L2 %.3g", worst);
    worst = compare("two/model.safetensors", "again/model.safetensors", &same);
    CHECKF(same, "two 2-rank runs are bitwise identical (worst relative L2 %.3g)", worst);
    worst = compare("two/checkpoint-000002.safetensors", "again/checkpoint-000002.safetensors", &same);
    CHECKF(same, "their step-2 checkpoints, optimizer state included, are bitwise identical");
    snprintf(path, sizeof path, "%s/two/train_log.jsonl", dir);
    f = fopen(path, "r");
    int lines = 0, ranks2 = 0;
    char line[1024];
    while (f && fgets(line, sizeof line, f)) lines++, ranks2 += strstr(line, "\"ranks\": 2") != NULL;
    if (f) fclose(f);
    CHECKF(lines == 3 && ranks2 == 3, "rank 0 alone logs each step once: %d lines, %d of 2 ranks", lines, ranks2);
    snprintf(path, sizeof path, "cd %s && grep -q 'global batch of 4' out.txt", dir);
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=said");
    CHECKF(rc == 0 && system(path) == 0, "the first lines state the global batch");

    /* ZeRO-1: each rank updates its share of the state; the same sums and the same element-wise updates give the
     * same bits as the unsharded run, and the checkpoint holds the whole state, gathered */
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=zero --set zero_stage=1");
    CHECKF(rc == 0, "the ZeRO-1 run exited %d", rc);
    if (rc) show_output();
    compare("zero/model.safetensors", "two/model.safetensors", &same);
    CHECKF(same, "ZeRO-1's weights are bitwise those of the unsharded 2-rank run");
    compare("zero/checkpoint-000002.safetensors", "two/checkpoint-000002.safetensors", &same);
    CHECKF(same, "ZeRO-1's checkpoint (its state gathered to rank 0) is bitwise the unsharded run's");
    /* the memory of a rank: measured (rank 0's step log) equals `plan --ranks 2`, and ZeRO-1 saves half the state */
    long long measured = -1, predicted = -1, whole = -1, opt_zero = -1, opt_whole = -1;
    snprintf(path, sizeof path, "%s/zero/train_log.jsonl", dir);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "\"peak_device_bytes\": ");
        if (at) measured = atoll(at + strlen("\"peak_device_bytes\": "));
    }
    if (f) fclose(f);
    const char *plan = SEGTRAIN_BIN " plan --config c.json --json --ranks 2 --set train_batch_size=2";
    for (int z = 0; z < 2; z++) {
        snprintf(line, sizeof line, "cd %s && %s --set zero_stage=%d", dir, plan, z);
        FILE *p = popen(line, "r");
        bool in_peak = false;
        char l[512];
        while (p && fgets(l, sizeof l, p)) {
            in_peak |= strstr(l, "predicted_peak_device_bytes") != NULL;
            const char *tot = in_peak ? strstr(l, "\"total\":") : NULL;
            const char *opt = in_peak ? strstr(l, "\"optimizer\":") : NULL;
            if (tot) *(z ? &predicted : &whole) = atoll(tot + 8);
            if (opt) *(z ? &opt_zero : &opt_whole) = atoll(opt + 12);
        }
        if (p) pclose(p);
    }
    CHECKF(measured > 0 && measured == predicted, "ZeRO-1 rank 0: measured peak %lld bytes, plan --ranks 2 %lld",
           measured, predicted);
    CHECKF(opt_zero > 0 && 2 * opt_zero == opt_whole && whole - predicted == opt_whole - opt_zero,
           "ZeRO-1 keeps half the optimizer state a rank: %lld of %lld bytes", opt_zero, opt_whole);
    printf("     a rank's peak: %lld bytes measured = %lld predicted with ZeRO-1, %lld without (optimizer state %lld "
           "against %lld)\n", measured, predicted, whole, opt_zero, opt_whole);

    /* resume: the step-2 checkpoint of the 2-rank ZeRO-1 run, continued by 2 ZeRO-1 ranks, by 2 unsharded ranks
     * and by one process of batch 4, reaches the uninterrupted run's step 3 */
    rc = run("mkdir -p from1 from2 fromz && cp zero/checkpoint-000002.safetensors from1/ && "
             "cp zero/checkpoint-000002.safetensors from2/ && cp zero/checkpoint-000002.safetensors fromz/");
    rc |= run(SEGTRAIN_BIN TRAIN "--set train_batch_size=4 --set output_dir=from1 --set resume_from_checkpoint=latest");
    CHECKF(rc == 0, "one process resumes the 2-rank checkpoint (exit %d)", rc);
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=from2 "
                    "--set resume_from_checkpoint=latest");
    CHECKF(rc == 0, "2 ranks resume it (exit %d)", rc);
    worst = compare("from2/model.safetensors", "two/model.safetensors", &same);
    CHECKF(same, "2 ranks resumed at step 2 end bitwise where the uninterrupted 2-rank run did (%.3g)", worst);
    rc = run(MPIRUN SEGTRAIN_BIN TRAIN "--set train_batch_size=2 --set output_dir=fromz --set zero_stage=1 "
                    "--set resume_from_checkpoint=latest");
    CHECKF(rc == 0, "2 ZeRO-1 ranks resume it, each taking its share of the state (exit %d)", rc);
    worst = compare("fromz/model.safetensors", "zero/model.safetensors", &same);
    CHECKF(same, "2 ZeRO-1 ranks resumed at step 2 end bitwise where the uninterrupted ZeRO-1 run did (%.3g)", worst);
    worst = compare("from1/model.safetensors", "two/model.safetensors", &same);
    CHECKF(worst <= 1e-5, "one process resumed at step 2 ends within 1e-5 of the 2-rank run: %.3g", worst);
    printf("     resumed at step 2: 2 ranks bitwise, 1 process within %.3g of the uninterrupted 2-rank run\n", worst);

    /* ranks given different configs (mpirun's MPMD form, one config per rank): the job stops at once, every rank
     * naming the first key that differs, before any collective of the run; the same weights under another path
     * are the same weights */
    static const char *const differ[][2] = {
        {"max_train_steps", "--set max_train_steps=4"},  {"zero_stage", "--set zero_stage=1"},
        {"checkpoint_step_interval", "--set checkpoint_step_interval=3"}, {"hidden_size", "--set hidden_size=128"},
        {"seed", "--set seed=12"},                       {"optimizer", "--set optimizer=lion"},
        {"learning_rate", "--set learning_rate=2e-3"},   {"train_batch_size", "--set train_batch_size=3"},
        {"gradient_accumulation_steps", "--set gradient_accumulation_steps=2"},
        {"pretrained_model_name_or_path: rank 1 reads other weights", "--set pretrained_model_name_or_path=w2.safetensors"},
    };
    rc = run("(" SEGTRAIN_BIN " init --config c.json --out w1.safetensors && " SEGTRAIN_BIN
             " init --config c.json --set seed=2 --out w2.safetensors)");
    CHECKF(rc == 0, "init of two weight files (exit %d)", rc);
#define MPMD "timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 1 "
#define RANK TRAIN "--set train_batch_size=2 --set output_dir=mixed --set pretrained_model_name_or_path=w1.safetensors "
    for (size_t i = 0; i < sizeof differ / sizeof *differ; i++) {
        char cmd[1500];
        snprintf(cmd, sizeof cmd, MPMD SEGTRAIN_BIN RANK " : -np 1 " SEGTRAIN_BIN RANK "%s", differ[i][1]);
        const time_t t0 = time(NULL);
        rc = run(cmd);
        snprintf(line, sizeof line, "cd %s && test $(grep -c '^segtrain train: %s' out.txt) -eq 2", dir, differ[i][0]);
        CHECKF(rc != 0 && rc != 124 && system(line) == 0 && difftime(time(NULL), t0) < 60,
               "ranks differing in %s: the job exits %d, both ranks naming it", differ[i][0], rc);
        if (system(line)) show_output();
    }
    rc = run(MPMD SEGTRAIN_BIN RANK " : -np 1 " SEGTRAIN_BIN RANK "--set pretrained_model_name_or_path=./w1.safetensors");
    CHECKF(rc == 0, "the same weights under another path train (exit %d)", rc);

    /* a rank killed in step 3: the other exits within seconds, and the step-2 checkpoint stays whole */
    const time_t start = time(NULL);
    rc = run(MPIRUN "-x SEGTRAIN_FAULT=kill-rank-1-step-3 " SEGTRAIN_BIN TRAIN
                    "--set train_batch_size=2 --set output_dir=killed --set max_train_steps=6");
    const double took = difftime(time(NULL), start);
    CHECKF(rc != 0 && took < 60, "a killed rank ends the job with an error (exit %d) within seconds (%.0f s)", rc,
           took);
    printf("     rank 1 killed in step 3: the job exited %d after %.0f s\n", rc, took);
    sft_file *ck = NULL;
    snprintf(path, sizeof path, "%s/killed/checkpoint-000002.safetensors", dir);
    CHECKF(sft_open(path, &ck) == ST_OK, "the step-2 checkpoint of the killed run loads: %s", st_error());
    sft_close(ck);
    struct stat sb;
    snprintf(path, sizeof path, "%s/killed/checkpoint-000004.safetensors", dir);
    CHECK(stat(path, &sb) != 0);

    snprintf(path, sizeof path, "rm -rf %s", dir);
    if (system(path)) printf("     could not remove %s\n", dir);
    return tk_finish();
}
