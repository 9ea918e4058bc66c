/* Scratch files for the fuzz targets whose code under test reads paths: one folder per process, made on first use
 * (in /dev/shm when there is one, so that fsyncs cost nothing) and removed with its files at exit. A target that
 * libFuzzer stops (a finding, -rss_limit_mb) exits without atexit handlers, so fuzz/run.sh names a folder of its
 * own in SEGTRAIN_FUZZ_DIR, which it removes after the target whatever happened: nothing is left in /dev/shm. */
#ifndef SEGTRAIN_FUZZ_FILES_H
#define SEGTRAIN_FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir_path[256];

static void fuzz_dir_remove(void)
{
    char cmd[300]; /* the folder's files are the target's own, but their names vary: a recursive removal */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_path);
}

/* dir/name in a static buffer (one live at a time per call site's copy: callers copy it if they keep it). */
static const char *fuzz_path(const char *name)
{
    if (!fuzz_dir_path[0]) {
        struct stat st;
        const char *base = getenv("SEGTRAIN_FUZZ_DIR");
        if (!base || !*base) base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/segtrain-fuzz-XXXXXX", base);
        if (!mkdtemp(fuzz_dir_path)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, name);
    return path;
}

/* Writes size bytes to dir/name (replacing it) and returns its path; aborts if it cannot (a broken harness). */
static const char *fuzz_write(const char *name, const void *data, size_t size)
{
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

#endif
