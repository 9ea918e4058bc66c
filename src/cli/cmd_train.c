/* `segtrain train`: the daily command. A progress bar on a terminal, plain lines otherwise; the memory plan
 * before the first step; the run's files in output_dir. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "segtrain/dist.h"
#include "segtrain/train.h"

static const char train_help[] =
    "usage: segtrain train [--config C] [--set key=value ...]\n"
    "\n"
    "Trains the configured model (without --config, every key's default) with the rectified-flow objective on\n"
    "data_backend_config (a SimpleTuner multidatabackend.json's local image backends; docs/DATA.md),\n"
    "data_cache_dir (VAE latents and text-encoder states from scripts/make_cache.py; docs/CACHE.md), data_dir\n"
    "(PNG images with optional .txt captions, or class subfolders) or, with none of them, the built-in dataset of\n"
    "procedurally drawn shapes. Without a cache segtrain has no VAE, so images train in pixel space: in_channels 3\n"
    "and vae_scale_factor 1 (resolution is then the image edge in pixels, as in SimpleTuner). Before the first\n"
    "step it prints the checkpoint plan and the predicted peak memory by tag, and refuses a run whose peak exceeds\n"
    "device_memory. On data_backend_config it trains each batch at its aspect bucket's shape (SimpleTuner's\n"
    "buckets; docs/DATA.md); with bucket_shapes on synthetic data, each step at one of them in a seeded order. It\n"
    "predicts every bucket's peak and refuses a run whose largest does not fit, naming it. Then, in output_dir:\n"
    "  checkpoint-<step>.safetensors  every checkpoint_step_interval steps (atomic; checkpoints_total_limit\n"
    "                                 keeps the newest); resume_from_checkpoint latest|PATH continues the run\n"
    "  validation/step-<step>.png     a sample grid every validation_steps, one row per class\n"
    "  train_log.jsonl                step, loss, lr, grad_norm, sec_per_step, peak_device_bytes (and the\n"
    "                                 bucket) per step\n"
    "  model.safetensors              the final weights (for model_type lora, pytorch_lora_weights.safetensors:\n"
    "                                 the adapters under PEFT's names)\n"
    "  ema/                           with use_ema, the average of the weights, under the same name\n"
    "A loss or gradient that is not finite stops the run, naming the step; the last good checkpoint is kept.\n"
    "Ctrl-C or SIGTERM (a scheduler taking the machine back) lets the step under way finish, writes its\n"
    "checkpoint whatever checkpoint_step_interval says, and exits with 130 or 143; resume_from_checkpoint=latest\n"
    "then continues the same run. A second one stops at once.\n"
    "\n"
    "Data-parallel: `mpirun -np N segtrain train ...` trains on N ranks (a build with MPI: libopenmpi-dev). Each\n"
    "rank trains train_batch_size samples of every global batch of N x train_batch_size, the same samples one\n"
    "process with that batch would; gradients are summed in rank order (bitwise repeatable for a given N) and\n"
    "every rank steps the same weights. Rank 0 prints and writes every file; give each rank one thread\n"
    "(OMP_NUM_THREADS=1, or --threads 1) where ranks share cores.\n"
    "\n"
    "example:\n"
    "  segtrain train --config c.json --set model_preset=dit-tiny --set in_channels=3 \\\n"
    "      --set vae_scale_factor=1 --set resolution=32\n";

/* SIGINT and SIGTERM set stop_signal and restore the default action (SA_RESETHAND), so that a second one ends
 * the process at once; SA_RESTART keeps the data loader's reads and the checkpoint's writes going. */
static volatile sig_atomic_t stop_signal;
static bool quiet_rank;

static void on_stop(int sig)
{
    static const char said[] = "\nsegtrain train: interrupted: finishing this step, then writing its checkpoint "
                               "(again to stop at once)\n";
    stop_signal = sig;
    if (!quiet_rank) (void)!write(2, said, sizeof said - 1);
}

static void catch_stops(void)
{
    quiet_rank = dist_rank() != 0;
    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART | SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Whether the run stops here: a signal reached this process, or with several ranks any of them, so that every
 * rank stops after the same step. */
static bool stop_agreed(st_status *st)
{
    double stop = stop_signal != 0;
    if (dist_size() > 1) *st = dist_sum_double(&stop);
    return !*st && stop > 0;
}

static void format_time(char *buf, size_t n, double s)
{
    if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%.0fs", s);
}

/* One line of progress: a bar on a terminal (redrawn in place), a plain line otherwise. */
static void progress(const train_step_info *in, int64_t total, double avg, bool tty)
{
    char eta[32];
    format_time(eta, sizeof eta, avg * (double)(total - in->step));
    if (tty) {
        const int width = 24, filled = (int)(width * in->step / (total ? total : 1));
        fprintf(stderr, "\r%6lld/%lld [", (long long)in->step, (long long)total);
        for (int i = 0; i < width; i++) fputc(i < filled ? '=' : i == filled ? '>' : ' ', stderr);
        fprintf(stderr, "] loss %.4f  %.3f s/step  peak %.1f MiB%s%s  ETA %s   ", in->loss, in->seconds,
                in->peak_device / 1048576.0, in->bucket_name ? " at " : "", in->bucket_name ? in->bucket_name : "", eta);
    } else {
        fprintf(stderr, "step %lld/%lld loss %.5f lr %.3g grad_norm %.3g %.3f s/step peak %.1f MiB%s%s ETA %s\n",
                (long long)in->step, (long long)total, in->loss, in->lr, in->grad_norm, in->seconds,
                in->peak_device / 1048576.0, in->bucket_name ? " at " : "", in->bucket_name ? in->bucket_name : "", eta);
    }
    fflush(stderr);
}

/* A run over several shapes: each bucket's predicted peak, the largest the run's (the breakdown that follows). */
static void print_bucket_peaks(const trainer *t)
{
    const bucket_shape *shapes;
    const int n = trainer_buckets(t, &shapes);
    for (int i = 0; n > 1 && i < n; i++) {
        char name[48], bytes[24];
        bucket_shape_name(&shapes[i], name, sizeof name);
        const pool_stats *p = trainer_bucket_predicted(t, i, false);
        fprintf(stderr, "bucket %-14s predicted peak device memory per step %s%s\n", name, st_bytes(bytes, p->peak),
                p == trainer_predicted(t, false) ? "  (the run's peak)" : "");
    }
}

int cmd_train(int argc, char **argv)
{
    const char *config_path = NULL;
    const cli_flag flags[] = {{"--config", .text = &config_path}, {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(train_help, stdout), 0) : rc;
    config *cfg = NULL;
    trainer *t = NULL;
    st_status st = dist_init(&argc, &argv); /* a rank of `mpirun -np N segtrain train`, or a single process */
    if (!st && dist_rank()) { /* rank 0 speaks for the job; the others say only what goes wrong */
        if (!freopen("/dev/null", "w", stdout)) st = st_fail(ST_ERR_IO, "rank %d: cannot silence stdout", dist_rank());
    }
    if (!st) st = cli_load_config(config_path, &a, &cfg);
    if (!st) st = trainer_create(cfg, dist_rank() ? NULL : stderr, &t);
    if (!st && !dist_rank()) {
        print_plans(stderr, trainer_model(t));
        print_bucket_peaks(t);
        print_peak(stderr, "predicted peak device memory per step", trainer_predicted(t, false));
        if (trainer_predicted(t, true)->peak) print_peak(stderr, "predicted peak host memory per step", trainer_predicted(t, true));
    }
    const bool tty = isatty(2);
    const int64_t total = st ? 0 : trainer_total_steps(t), every = total >= 20 ? total / 20 : 1;
    double spent = 0;
    int64_t timed = 0, first = st ? 0 : trainer_steps_done(t);
    bool stopped = false;
    if (!st) catch_stops(); /* set up: from here on an interrupt loses nothing */
    while (!st && !trainer_done(t) && !(stopped = stop_agreed(&st))) {
        train_step_info in;
        st = trainer_step(t, &in);
        if (st) break;
        if (in.step > 1 || total == 1) spent += in.seconds, timed++; /* the first step warms caches up */
        const double avg = timed ? spent / (double)timed : in.seconds;
        if (dist_rank()) continue;
        if (tty || in.step % every == 0 || in.step == total || in.checkpoint || in.validation) progress(&in, total, avg, tty);
        if (in.checkpoint || in.validation) {
            if (tty) fputc('\n', stderr);
            if (in.checkpoint) fprintf(stderr, "saved %s\n", in.checkpoint);
            if (in.validation) fprintf(stderr, "sampled %s\n", in.validation);
        }
    }
    if (tty && total && !dist_rank()) fputc('\n', stderr);
    const int sig = stop_signal ? stop_signal : SIGTERM; /* another rank's, when this one had none */
    const char *weights = NULL, *saved = NULL;
    if (!st && stopped && trainer_steps_done(t) > first) st = trainer_checkpoint(t, &saved);
    if (!st && stopped && !dist_rank())
        fprintf(stderr, "stopped by %s after step %lld of %lld: %s%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                (long long)trainer_steps_done(t), (long long)total, saved ? saved : "nothing new to save",
                saved ? " holds it; resume_from_checkpoint=latest continues the run" : "");
    if (!st && !stopped) st = trainer_finish(t, &weights);
    if (!st && !stopped) printf("trained %lld steps; weights in %s\n", (long long)trainer_steps_done(t), weights);
    trainer_destroy(t);
    config_free(cfg);
    const int code = st ? cli_error("train") : stopped ? 128 + sig : 0;
    if (!st) dist_finalize(); /* after an error the job ends without the others: MPI_Finalize would wait for them */
    return code;
}
