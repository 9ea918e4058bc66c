/* A main for the fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput once on every file of the folders
 * (or files) named on the command line, so that `make test` replays the committed corpora and reproducers with any
 * compiler, under ASan + UBSan in the sanitizer build. Each input lies in a buffer of exactly its size, so that a
 * read past its end is caught. Exits non-zero when a folder cannot be read or when nothing at all was replayed (a
 * replay of nothing must not pass); files starting with '.' are skipped (.gitkeep). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        if (f) fclose(f);
        return 1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    int bad = !buf || fread(buf, 1, n, f) != n;
    fclose(f);
    if (bad) fprintf(stderr, "replay: %s: cannot read\n", path);
    else {
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
    return bad;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FOLDER_OR_FILE ...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int failed = 0, total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && !S_ISDIR(st.st_mode)) {
            failed |= run_file(argv[i]), total++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: %s: cannot open the folder\n", argv[i]);
            return 1;
        }
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char **grown = realloc(names, (n + 1) * sizeof *names);
            if (!grown || !(grown[n] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2))) {
                fprintf(stderr, "replay: out of memory\n");
                return 1;
            }
            names = grown;
            sprintf(names[n++], "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        if (n) qsort(names, n, sizeof *names, cmp_str); /* the same order every run */
        for (size_t k = 0; k < n; k++) failed |= run_file(names[k]), free(names[k]), total++;
        free(names);
    }
    if (!total) fprintf(stderr, "replay: no inputs in %s ...\n", argv[1]);
    fprintf(stderr, "replay: %d inputs ran\n", total);
    return failed || !total;
}
