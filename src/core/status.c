#include "segtrain/status.h"

#include <stdarg.h>
#include <stdio.h>
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

const char *st_error(void) { return error_line; }

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
