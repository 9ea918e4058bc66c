/* Status codes and the thread-local error message that goes with them; the engine's one error policy.
 *
 * Every fallible function returns an st_status. On failure it has already written one human-readable
 * line into the calling thread's error buffer (st_error()), so the caller can propagate the code and the
 * outermost layer prints the line. Which failure gets which code:
 *
 * - Bad input (a config, a file, a command-line argument): ST_ERR_INVALID, _IO, _FORMAT or _UNSUPPORTED, with
 *   a line naming the thing, the value and what is valid.
 * - Memory. A pool's budget refuses with ST_ERR_OOM (device) or ST_ERR_HOST_OOM (host). Any other allocation
 *   (malloc, calloc, realloc, strdup, in every layer) that fails is ST_ERR_HOST_OOM through st_host_oom, which
 *   names what was being allocated. A function that must allocate returns a status, or keeps the failure and
 *   reports it at its next status (param_add, at param_set_check). Nothing aborts on running out of memory, and
 *   a failure is dropped only where a fallback does the same work without the memory.
 * - A broken invariant that the engine detects while it can still unwind (a plan whose states do not chain, a
 *   backward without a forward): ST_ERR_INTERNAL, freed and propagated like any other error.
 * - A contract violation, a caller's bug where no status can be returned or going on would corrupt state (a
 *   config getter asked for a key that does not exist, a pointer freed to a pool that did not allocate it, a
 *   backward without the state its forward kept): st_panic, which prints one line with file:line and aborts.
 *   No input reaches it, so nothing aborts on bad input; it stays on in Release (unlike assert), and the
 *   core dump stops at the bug instead of an error line far from it.
 *
 * Warnings have one channel too: a warning is a line for the person running segtrain (something ignored, skipped
 * or read differently, while the run goes on), handed to st_warn by whichever layer notices it. Where it goes is the
 * process's warning sink: stderr unless the CLI, the trainer (its log) or a test installs another. */
#ifndef SEGTRAIN_STATUS_H
#define SEGTRAIN_STATUS_H

#include <stddef.h>

typedef enum st_status {
    ST_OK = 0,
    ST_ERR_OOM,      /* the device pool's capacity would be exceeded */
    ST_ERR_HOST_OOM, /* the host pool's capacity would be exceeded, or the system refused host memory */
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

/* ST_ERR_HOST_OOM with "out of host memory for <what>", what being printf-style: what was being allocated,
 * as in `return st_host_oom("the checkpoint plan of %s", seq->name);`. */
st_status st_host_oom(const char *what_fmt, ...) __attribute__((format(printf, 1, 2)));

/* A contract violation (see above): prints "segtrain: internal error at file:line: <message>" and aborts. */
#define st_panic(...) st_panic_at(__FILE__, __LINE__, __VA_ARGS__)
void st_panic_at(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

/* A warning: formats one whole line (printf-style, no '\n', at any length) and hands it to the sink. The line names
 * its source itself, as users read it: "segtrain: warning: ...", "data: warning: ...", "data: skipped ...". */
void st_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Where warnings go: fn(ctx, line) for each line. The zero sink {NULL, NULL} is the default: the line and a newline
 * on stderr. One sink for the process (set it while one thread runs; a sink called from several threads must be safe
 * to); st_warn_set returns the sink it replaces, for the installer to put back. */
typedef struct st_warn_sink {
    void (*fn)(void *ctx, const char *line);
    void *ctx;
} st_warn_sink;
st_warn_sink st_warn_set(st_warn_sink sink);
/* Hands line to sink (the default when sink.fn is NULL): for a sink that passes lines on to the one it replaced. */
void st_warn_pass(st_warn_sink sink, const char *line);

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
