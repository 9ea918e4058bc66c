/* Test support: checks that count failures, deterministic random data, and the finite-difference
 * gradient check (central differences of a double-precision reference). Every test program ends with
 * `return tk_finish();`, which exits non-zero if any check failed. */
#ifndef SEGTRAIN_TESTKIT_H
#define SEGTRAIN_TESTKIT_H

#include <stdbool.h>
#include <stdint.h>

void tk_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (cond) tk_pass();                                                                                           \
        else tk_fail(__FILE__, __LINE__, "%s", #cond);                                                                 \
    } while (0)
#define CHECKF(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (cond) tk_pass();                                                                                           \
        else tk_fail(__FILE__, __LINE__, __VA_ARGS__);                                                                 \
    } while (0)

/* Counts a passed check (tk_fail counts a failed one). */
void tk_pass(void);
/* Prints "<N> passed, <M> failed" and returns the process exit code. */
int tk_finish(void);

/* Deterministic uniform values in [lo, hi). */
void tk_fill(float *x, int64_t n, uint64_t seed, float lo, float hi);
void tk_fill_d(double *x, int64_t n, uint64_t seed, double lo, double hi);
void tk_to_double(double *dst, const float *src, int64_t n);

/* A scalar function of some double arrays: typically sum(w * reference_forward(inputs)). */
typedef double (*tk_loss_fn)(void *ctx);

/* Central differences of f with respect to every element of x (length n), step h; x is restored. */
void tk_numeric_grad(tk_loss_fn f, void *ctx, double *x, int64_t n, double h, double *grad);

/* Checks max|got - want| <= tol * max|want| (a scale-relative error), prints one line with the worst
 * element, and counts the result. Returns whether it passed. */
bool tk_expect_close(const char *what, const float *got, const double *want, int64_t n, double tol);

/* As tk_expect_close, but returns the verdict without printing or counting (for meta-tests). */
bool tk_close(const float *got, const double *want, int64_t n, double tol, double *rel_err);

/* Bitwise equality of two float arrays; counts and prints like tk_expect_close. */
bool tk_expect_bitwise(const char *what, const float *got, const float *want, int64_t n);

/* "dir/name" in one of 8 rotating buffers, so that a few can be live in one call. */
const char *tk_path(const char *dir, const char *name);
/* The whole of file dir/name, NUL-terminated, in malloc'd memory; NULL if it cannot be read. */
char *tk_read_file(const char *dir, const char *name);

#endif
