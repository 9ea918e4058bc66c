/* The error policy (status.h): a failed allocation is ST_ERR_HOST_OOM with one line naming what was being
 * allocated, and every contract violation goes through st_panic, one line with file:line, then abort. */
#include <png.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "segtrain/config.h"
#include "segtrain/data.h"
#include "segtrain/plan.h"
#include "segtrain/ops.h"
#include "segtrain/params.h"
#include "segtrain/pool.h"
#include "segtrain/status.h"
#include "testkit.h"

static void test_host_oom_line(void)
{
    st_fail(ST_ERR_INVALID, "an earlier error");
    CHECK(st_host_oom("the checkpoint plan of %s", "blocks") == ST_ERR_HOST_OOM);
    CHECKF(!strcmp(st_error(), "out of host memory for the checkpoint plan of blocks"), "%s", st_error());
    char what[8000];
    memset(what, 'x', sizeof what - 1);
    what[sizeof what - 1] = 0;
    CHECK(st_host_oom("%s", what) == ST_ERR_HOST_OOM); /* cut at the buffer, still a line */
    CHECK(!strncmp(st_error(), "out of host memory for xxx", 26) && strlen(st_error()) < sizeof what);
}

/* Runs misuse(which) in a child and returns its stderr; *how: the signal that ended it, else 1000 + its exit
 * status (1000: it exited 0). */
static char *in_child(void (*misuse)(int), int which, int *how)
{
    char path[] = "/tmp/test_status_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        misuse(which);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    *how = WIFSIGNALED(status) ? WTERMSIG(status) : 1000 + WEXITSTATUS(status);
    char *text = calloc(4096, 1);
    if (text && pread(fd, text, 4095, 0) < 0) text[0] = 0;
    close(fd);
    unlink(path);
    return text;
}

static void misuse(int which)
{
    pool *a = pool_create(POOL_HOST, 0), *b = pool_create(POOL_DEVICE, 0);
    config *c = NULL;
    void *x = NULL;
    switch (which) {
    case 0: st_panic("a %s of %d", "contract", 7);
    case 1: /* a pointer freed to a pool that did not allocate it */
        if (!pool_alloc(a, 64, MEM_WORKSPACE, "x", &x)) pool_free(b, x);
        break;
    case 2: /* a getter asked for a key that does not exist */
        if (!config_parse("{}", "test", &c)) config_int(c, "no_such_key");
        break;
    case 3: /* a getter of the wrong type */
        if (!config_parse("{}", "test", &c)) config_bool(c, "seed");
        break;
    case 4: { /* a backward without the state its forward kept */
        float v[8] = {0};
        layernorm_backward(v, v, v, v, v, v, 1, 8, NULL);
        break;
    }
    case 5: { /* rope on an odd head size */
        float v[5] = {0}, table[4] = {0};
        rope_forward(v, 1, 1, 1, 5, 5, 5, table);
        break;
    }
    case 6: { /* a rope table axis of odd width */
        float table[4] = {0}, ids[2] = {0};
        rope_table(table, ids, 1, 2, (const int64_t[]){2, 3}, 10000.0);
        break;
    }
    }
}

static void test_contract_violations_panic(void)
{
    static const char *const want[] = {"a contract of 7", "pool_free of a pointer this device pool did not allocate",
                                       "config_int(\"no_such_key\"): no such config key",
                                       "config_bool(\"seed\"): it is a int key", "layernorm_backward needs the state",
                                       "rope: head_dim 5 (need an even size >= 2)",
                                       "rope_table: axes_dim[1] = 3 (need an even width >= 2)"};
    for (int i = 0; i < (int)(sizeof want / sizeof *want); i++) {
        int sig = 0;
        char *err = in_child(misuse, i, &sig);
        const char *at = err ? strstr(err, "segtrain: internal error at ") : NULL;
        const char *colon = at ? strstr(at, ".c:") : NULL; /* file:line */
        CHECKF(sig == SIGABRT && at == err && colon && colon[3] >= '1' && colon[3] <= '9' && strstr(err, want[i]) &&
                   !strchr(strchr(err, '\n') ? strchr(err, '\n') + 1 : "", '\n'),
               "misuse %d: signal %d, stderr \"%s\"", i, sig, err ? err : "?");
        if (i == 0) CHECKF(err && strstr(err, "test_status.c:"), "st_panic names its caller: %s", err ? err : "?");
        free(err);
    }
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* With the address space capped, registering parameters runs out of memory: a status, not an abort. (Not
 * under ASan, whose shadow memory needs more address space than any cap leaves.) */
static void register_until_oom(int unused)
{
    (void)unused;
    param_set s = {0};
    struct rlimit lim = {.rlim_cur = (rlim_t)1 << 30, .rlim_max = (rlim_t)1 << 30};
    if (setrlimit(RLIMIT_AS, &lim)) _exit(3);
    for (int i = 0; i < 100000000 && !s.oom; i++) param_add(&s, "p", 1, (const int64_t[]){1}, true);
    st_status st = param_set_check(&s);
    fprintf(stderr, "%d %s\n", (int)st, st_error());
    _exit(st == ST_ERR_HOST_OOM && param_add(&s, "q", 1, (const int64_t[]){1}, true) == -1 ? 0 : 4);
}

static void test_params_out_of_memory(void)
{
#ifdef UNDER_ASAN
    printf("params out of memory: skipped under AddressSanitizer\n");
    return;
#endif
    int how = 0;
    char *err = in_child(register_until_oom, 0, &how);
    char want[64];
    snprintf(want, sizeof want, "%d out of host memory for the list of parameters (", (int)ST_ERR_HOST_OOM);
    CHECKF(how == 1000 && err && !strncmp(err, want, strlen(want)), "child ended %d, stderr \"%s\"", how,
           err ? err : "?");
    free(err);
}

/* ---- warnings: one sink (status.h) that the config and data layers write to ---- */

static void warn_long(int which)
{
    (void)which;
    st_warn("data: skipped %0600d", 7); /* the default sink: the line on stderr */
}

static void test_warning_sink(void)
{
    int how = 0;
    char *err = in_child(warn_long, 0, &how);
    CHECKF(how == 1000 && err && strlen(err) == 615 && !strncmp(err, "data: skipped 0000", 18) &&
               !strcmp(err + 612, "07\n"),
           "the default sink wrote \"%.40s...\"", err ? err : "?");
    free(err);
    tk_warn_begin();
    char what[5000];
    memset(what, 'y', sizeof what - 1);
    what[sizeof what - 1] = 0;
    st_warn("segtrain: warning: %s", what); /* formatted whole, at any length */
    const char *w = tk_warn_end();
    CHECKF(strlen(w) == 19 + sizeof what && w[19 + sizeof what - 2] == 'y', "a long warning: %zu bytes", strlen(w));

    /* the config's: keys segtrain does not read, and checkpointing keys that do nothing */
    config *c = NULL;
    CHECKF(config_parse("{\"frobnicate\": 1, \"gradient_checkpointing_interval\": 2}", "w.json", &c) == ST_OK, "%s",
           st_error());
    tk_warn_begin();
    if (c) config_warn(c);
    CHECK(c && ckpt_settings_warn(c) == ST_OK);
    w = tk_warn_end();
    config_free(c);
    CHECKF(tk_count(w, "segtrain: warning: ") == 2 && strstr(w, "frobnicate") &&
               strstr(w, "segtrain: warning: gradient_checkpointing_interval does nothing while gradient_checkpointing "
                         "is false\n"),
           "the config's warnings: \"%s\"", w);

    /* the data's: a file it skips, and a backend's keys it does not read */
    char dir[] = "/tmp/test_status_data_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const unsigned char px[4 * 4 * 3] = {0};
    tk_write_png(dir, "a_cat.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(dir, "photo.jpg", "jpeg is not read");
    char json[512];
    snprintf(json, sizeof json, "[{\"id\": \"b\", \"instance_data_dir\": \"%s\", \"frobnicate\": 1}]", dir);
    tk_write_file(dir, "bk.json", json);
    dataset *ds[2] = {NULL, NULL};
    tk_warn_begin();
    const st_status folder = dataset_open_folder(dir, 4, &ds[0]);
    const st_status backends = dataset_open_backends(tk_path(dir, "bk.json"), 4, 1, &ds[1]);
    w = tk_warn_end();
    CHECKF(folder == ST_OK && backends == ST_OK, "%s", st_error());
    char skipped[128];
    snprintf(skipped, sizeof skipped, "data: skipped %s/photo.jpg: unsupported image format (only PNG is read)\n", dir);
    CHECKF(tk_count(w, skipped) == 2 && strstr(w, "data: warning: ") &&
               strstr(w, "backend 'b': ignoring keys segtrain does not read: frobnicate\n"),
           "the data's warnings: \"%s\"", w);
    dataset_close(ds[0]);
    dataset_close(ds[1]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_warning_sink();
    test_host_oom_line();
    test_contract_violations_panic();
    test_params_out_of_memory();
    return tk_finish();
}
