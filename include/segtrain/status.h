/* Status codes and the thread-local error message that goes with them.
 *
 * Every fallible function returns an st_status. On failure it has already written one human-readable
 * line into the calling thread's error buffer (st_error()), so the caller can propagate the code and the
 * outermost layer prints the line. Nothing in the engine aborts on bad input or on running out of memory. */
#ifndef SEGTRAIN_STATUS_H
#define SEGTRAIN_STATUS_H

#include <stddef.h>

typedef enum st_status {
    ST_OK = 0,
    ST_ERR_OOM,      /* the device pool's capacity would be exceeded */
    ST_ERR_HOST_OOM, /* the host pool's capacity would be exceeded */
    ST_ERR_INVALID,  /* bad input: config, shape, argument */
    ST_ERR_IO,       /* a file could not be read or written */
    ST_ERR_FORMAT,   /* a file was read but its contents are malformed */
    ST_ERR_NUMERIC,  /* a loss or gradient that is not finite */
    ST_ERR_UNSUPPORTED, /* a checkpointing option the engine refuses to apply (the spec's refusals) */
    ST_ERR_INTERNAL  /* a broken invariant inside the engine */
} st_status;

/* Sets the calling thread's error message (printf-style) and returns code, so that
 * `return st_fail(ST_ERR_INVALID, "interval must be >= 1, got %d", k);` reads as one statement. */
st_status st_fail(st_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's last error message ("" if none). */
const char *st_error(void);

/* Seconds on a monotonic clock: for measuring durations. */
double clock_seconds(void);

/* A byte count as a person reads it ("512 B", "1.0 KiB", "5.33 MiB", "1.20 GiB", up to EiB), written into buf,
 * which it returns: a budget of 1 KiB must not read 0.00 MiB. */
const char *st_bytes(char buf[24], size_t bytes);

/* A short name for a status code ("out of device memory", ...). */
const char *st_status_name(st_status s);

#endif
