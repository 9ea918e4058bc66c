/* Test support: checks that count failures, deterministic random data, the finite-difference
 * gradient check (central differences of a double-precision reference), and files, PNGs, captured stderr and
 * image resampling references for the tests that read data. Every test program ends with
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
/* Whether files a and b both open and hold the same bytes. */
bool tk_same_file(const char *a, const char *b);
/* An op's three gradients (names[k], sizes[k] floats) taken at 1 thread (one) and at 2 (two) are the same bits,
 * and, with alone (may be NULL), each asked for by itself is the full call's: checked as "tag name ...", then all
 * the buffers freed. */
void tk_expect_grads_agree(const char *tag, const char *const names[3], const int64_t sizes[3], float *one[3],
                           float *two[3], float *alone[3]);

/* "dir/name" in one of 8 rotating buffers, so that a few can be live in one call. */
const char *tk_path(const char *dir, const char *name);
/* The whole of file dir/name, NUL-terminated, in malloc'd memory; NULL if it cannot be read. */
char *tk_read_file(const char *dir, const char *name);
/* Writes text as dir/name (a file that cannot be written shows as the test's later failure to read it). */
void tk_write_file(const char *dir, const char *name, const char *text);
/* Writes a w x h PNG as dir/name with libpng's simplified writer and checks that it could: format is a
 * PNG_FORMAT_* (gray, RGB, RGBA, or colour-mapped with a colormap of entries). */
void tk_write_png(const char *dir, const char *name, int w, int h, unsigned format, const void *pixels,
                  const void *colormap, int entries);
/* n deterministic bytes (an LCG's top byte), for image pixels. */
void tk_fill_bytes(unsigned char *p, int n, uint64_t seed);

/* Sends stderr to dir/stderr.log until tk_capture_end, which restores it and returns what was written
 * (the first 8 KiB, in a buffer the next call reuses): to count what the code under test reports. */
void tk_capture_begin(const char *dir);
const char *tk_capture_end(void);
/* Sends st_warn's lines to a buffer (the warning sink, status.h) until tk_warn_end, which puts back the sink it
 * replaced and returns them, each with a '\n' ("" if none; valid until the next tk_warn_begin). */
void tk_warn_begin(void);
const char *tk_warn_end(void);
/* How often needle occurs in hay, not overlapping. */
int tk_count(const char *hay, const char *needle);

/* Independent references for resampling an 8-bit RGB image of width w, into R x R planes in [-1, 1]: the area
 * average (shrink) and the bilinear with pixel centers at +0.5 and edges clamped (grow) of its S x S crop at
 * (x0, y0); tk_max_diff is max|got - want|. */
void tk_ref_shrink(const unsigned char *px, int w, int x0, int y0, int S, int R, double *out);
void tk_ref_grow(const unsigned char *px, int w, int x0, int y0, int S, int R, double *out);
double tk_max_diff(const float *got, const double *want, int n);

/* A parity fixture's bf16 yardstick, tests/fixtures/<fixture>/bf16_yardstick.json (scripts/bf16_yardstick.py,
 * docs/FIXTURES.md): per parity file ("parity", "parity_hw") and per tensor that file checks ("pred", "loss",
 * "grad.<parameter>"), the relative L2 error of PyTorch's bf16 run of the diffusers class against the float64
 * reference: the median over draws (the file's inputs, and those inputs perturbed by a fraction of a bf16 ulp, each
 * against its own reference), every draw's kept. */
typedef struct tk_yardstick tk_yardstick;
/* The fixture's yardstick, checked well-formed: a "files" object whose every file has "reference_loss",
 * "loss_bound" >= 0, "errors", a finite error >= 0 per tensor, "pred" and "loss" among them, and "draws", per tensor
 * its draws' errors, their smallest and largest around its error. NULL where it is missing or malformed, with why (a
 * static string) in *why. */
tk_yardstick *tk_yardstick_load(const char *fixture, const char **why);
void tk_yardstick_free(tk_yardstick *y);
/* How many tensors file lists (0: the yardstick has no such file), and the float32 loss of the parity file it was
 * measured on (NAN: none): a fixture rewritten since gives another. */
int tk_yardstick_count(const tk_yardstick *y, const char *file);
double tk_yardstick_reference_loss(const tk_yardstick *y, const char *file);
/* PyTorch's bf16 error for tensor of file; -1 where the yardstick does not list it. */
double tk_yardstick_error(const tk_yardstick *y, const char *file, const char *tensor);
/* The smallest and largest of PyTorch's draws for tensor of file; false where the yardstick does not list it. */
bool tk_yardstick_spread(const tk_yardstick *y, const char *file, const char *tensor, double *lo, double *hi);
/* Checks (and counts) that err, segtrain's error on the same tensor and metric, is at most 2x PyTorch's (exactly 0
 * where PyTorch's is 0): the accuracy bar of issue 42. The loss's bar is 2x loss_bound, the largest loss error
 * PyTorch's prediction error can give: its measured loss error is one draw, small by chance. what names the run in
 * the message. */
bool tk_expect_within_yardstick(const tk_yardstick *y, const char *what, const char *file, const char *tensor,
                                double err);

#endif
