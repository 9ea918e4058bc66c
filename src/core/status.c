#include "segtrain/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char error_line[4096]; /* a config with many errors lists them all */

st_status st_fail(st_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_line, sizeof error_line, fmt, ap);
    va_end(ap);
    return code;
}

st_status st_host_oom(const char *what_fmt, ...)
{
    static const char lead[] = "out of host memory for ";
    memcpy(error_line, lead, sizeof lead); /* no allocation on the way to reporting that there is none */
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(error_line + sizeof lead - 1, sizeof error_line - (sizeof lead - 1), what_fmt, ap);
    va_end(ap);
    return ST_ERR_HOST_OOM;
}

void st_panic_at(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout); /* what the process printed so far, before the abort's core dump */
    fprintf(stderr, "segtrain: internal error at %s:%d: %s\n", file, line, msg);
    abort();
}

const char *st_error(void) { return error_line; }

static st_warn_sink warn_sink; /* the process's one; {NULL, NULL}: stderr */

st_warn_sink st_warn_set(st_warn_sink sink)
{
    const st_warn_sink was = warn_sink;
    warn_sink = sink;
    return was;
}

void st_warn_pass(st_warn_sink sink, const char *line)
{
    if (sink.fn) sink.fn(sink.ctx, line);
    else fprintf(stderr, "%s\n", line); /* one call: lines from several threads do not interleave */
}

void st_warn(const char *fmt, ...)
{
    char small[512], *line = small;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    /* a longer line is formatted whole; without the memory for it, the first 511 bytes still say what happened */
    if (n >= (int)sizeof small && (line = malloc((size_t)n + 1))) vsnprintf(line, (size_t)n + 1, fmt, again);
    va_end(again);
    st_warn_pass(warn_sink, line ? line : small);
    if (line != small) free(line);
}

const char *st_status_name(st_status s)
{
    switch (s) {
    case ST_OK: return "ok";
    case ST_ERR_OOM: return "out of device memory";
    case ST_ERR_HOST_OOM: return "out of host memory";
    case ST_ERR_INVALID: return "invalid input";
    case ST_ERR_IO: return "i/o error";
    case ST_ERR_FORMAT: return "malformed file";
    case ST_ERR_NUMERIC: return "non-finite value";
    case ST_ERR_UNSUPPORTED: return "unsupported option";
    case ST_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *st_bytes(char buf[24], size_t bytes)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, 24, "%zu B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    for (; v >= 1024 && u < 5; u++) v /= 1024;
    snprintf(buf, 24, u ? "%.2f %s" : "%.1f %s", v, units[u]);
    return buf;
}

double clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
