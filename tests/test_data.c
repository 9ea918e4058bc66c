/* Data: the builtin scenes (determinism, colours, shapes, captions), folder datasets of PNGs written here with
 * libpng (every colour type, crop and resize against an independent reference, bad files reported once and
 * skipped, class subfolders), the epoch iterator (coverage, exact resume, seeds) and PNG grids read back.
 * SimpleTuner backend lists are test_backends.c's. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/data.h"
#include "testkit.h"

static char root[256];

static const char *captured = ""; /* what the last captured call reported */

static void make_dir(const char *name) { mkdir(tk_path(root, name), 0755); }

/* ---- builtin ---- */

/* The test's own idea of each colour word, in [0, 1]. */
static const struct {
    const char *word;
    double rgb[3];
} colour_words[] = {
    {"red", {0.86, 0.16, 0.16}},     {"green", {0.16, 0.71, 0.24}},  {"blue", {0.2, 0.35, 0.9}},
    {"yellow", {0.94, 0.82, 0.16}},  {"magenta", {0.82, 0.2, 0.82}}, {"cyan", {0.16, 0.82, 0.86}},
    {"orange", {0.96, 0.53, 0.12}},  {"white", {0.96, 0.96, 0.96}},  {"black", {0.07, 0.07, 0.09}},
    {"gray", {0.43, 0.43, 0.45}},    {"navy", {0.08, 0.12, 0.37}},   {"brown", {0.41, 0.25, 0.12}},
    {"dark green", {0.08, 0.31, 0.16}}, {"maroon", {0.39, 0.08, 0.18}},
};

static const double *colour_of(const char *word)
{
    for (size_t i = 0; i < sizeof colour_words / sizeof colour_words[0]; i++)
        if (strcmp(colour_words[i].word, word) == 0) return colour_words[i].rgb;
    return NULL;
}

/* Splits "a <colour> <shape> on a <background> background" ("an" before a vowel). */
static bool parse_caption(const char *cap, char *colour, char *shape, char *background)
{
    char article[4], rest[CAPTION_MAX];
    if (sscanf(cap, "%3s %31s %31s on a %255[^\n]", article, colour, shape, rest) != 4) return false;
    if (strcmp(article, strchr("aeiou", colour[0]) ? "an" : "a") != 0) return false;
    size_t n = strlen(rest);
    const char *tail = " background";
    if (n <= strlen(tail) || strcmp(rest + n - strlen(tail), tail) != 0) return false;
    rest[n - strlen(tail)] = 0;
    strcpy(background, rest);
    return true;
}

static void test_builtin_basics(void)
{
    const int R = 32, per = 3 * R * R;
    dataset *ds, *same, *other;
    CHECK(dataset_open_builtin(R, 4096, 7, &ds) == ST_OK);
    CHECK(dataset_open_builtin(R, 4096, 7, &same) == ST_OK);
    CHECK(dataset_open_builtin(R, 4096, 8, &other) == ST_OK);
    CHECK(dataset_size(ds) == 4096 && dataset_channels(ds) == 3 && dataset_resolution(ds) == R);
    CHECK(dataset_classes(ds) == 8);
    CHECK(dataset_class_name(ds, -1) == NULL && dataset_class_name(ds, 8) == NULL);
    float *a = malloc(sizeof(float) * per), *b = malloc(sizeof(float) * per);
    int64_t la, lb;
    char ca[CAPTION_MAX], cb[CAPTION_MAX];

    CHECK(dataset_get(ds, 123, a, &la, ca) == ST_OK);
    CHECK(dataset_get(same, 123, b, &lb, cb) == ST_OK);
    CHECK(memcmp(a, b, sizeof(float) * per) == 0 && la == lb && strcmp(ca, cb) == 0);
    CHECK(dataset_get(ds, 123, b, NULL, NULL) == ST_OK && memcmp(a, b, sizeof(float) * per) == 0);
    CHECK(dataset_get(ds, 123 + 8, b, &lb, NULL) == ST_OK); /* same class, another sample */
    CHECK(lb == la && memcmp(a, b, sizeof(float) * per) != 0);
    CHECK(dataset_get(other, 123, b, &lb, NULL) == ST_OK); /* another seed */
    CHECK(lb == la && memcmp(a, b, sizeof(float) * per) != 0);
    CHECK(dataset_get(ds, 4096, a, NULL, NULL) == ST_ERR_INVALID);
    CHECK(dataset_get(ds, -1, a, NULL, NULL) == ST_ERR_INVALID);

    /* values in [-1, 1], captions name the label's class, both kinds of variation happen */
    int bad_range = 0, bad_caption = 0, backgrounds_seen = 0;
    char seen[16][CAPTION_MAX] = {{0}};
    for (int64_t i = 0; i < 200; i++) {
        if (dataset_get(ds, i, a, &la, ca) != ST_OK) bad_caption++;
        for (int k = 0; k < per; k++) bad_range += !(a[k] >= -1.0f && a[k] <= 1.0f);
        char colour[32], shape[32], bg[CAPTION_MAX], name[80];
        if (!parse_caption(ca, colour, shape, bg)) {
            bad_caption++;
            continue;
        }
        snprintf(name, sizeof name, "%s %s", colour, shape);
        bad_caption += la != i % 8 || strcmp(name, dataset_class_name(ds, (int)la)) != 0 || !colour_of(bg);
        bool known = false;
        for (int s = 0; s < backgrounds_seen; s++) known |= strcmp(seen[s], bg) == 0;
        if (!known && backgrounds_seen < 16) strcpy(seen[backgrounds_seen++], bg);
    }
    CHECKF(bad_range == 0, "%d values outside [-1, 1]", bad_range);
    CHECKF(bad_caption == 0, "%d captions do not match their labels", bad_caption);
    CHECKF(backgrounds_seen >= 5, "only %d background colours in 200 samples", backgrounds_seen);

    dataset_close(same);
    CHECK(dataset_open_builtin(3, 10, 0, &same) == ST_ERR_INVALID && same == NULL);
    CHECK(dataset_open_builtin(32, 0, 0, &same) == ST_ERR_INVALID);
    free(a);
    free(b);
    dataset_close(ds);
    dataset_close(other);
}

/* Each class is drawn in its colour on its caption's background, and as its shape (fill ratio of the bounding
 * box: square ~1, circle ~pi/4, triangle and diamond ~1/2). */
static void test_builtin_colours(void)
{
    static const int sizes[] = {8, 16, 32, 64};
    for (int si = 0; si < 4; si++) {
        const int R = sizes[si], per = 3 * R * R;
        dataset *ds;
        CHECK(dataset_open_builtin(R, 64, 11, &ds) == ST_OK);
        float *img = malloc(sizeof(float) * per);
        int bad_bg = 0, bad_fg = 0, bad_shape = 0, bad_range = 0;
        for (int64_t i = 0; i < 64; i++) {
            int64_t label;
            char cap[CAPTION_MAX], colour[32], shape[32], bgw[CAPTION_MAX];
            dataset_get(ds, i, img, &label, cap);
            for (int k = 0; k < per; k++) bad_range += !(img[k] >= -1.0f && img[k] <= 1.0f);
            if (!parse_caption(cap, colour, shape, bgw) || !colour_of(colour) || !colour_of(bgw)) {
                bad_fg++;
                continue;
            }
            const double *want_fg = colour_of(colour), *want_bg = colour_of(bgw);
            double corner[3];
#define PIX(ch, y, x) ((img[((ch) * R + (y)) * R + (x)] + 1.0) / 2.0)
            for (int ch = 0; ch < 3; ch++) corner[ch] = PIX(ch, 0, 0);
            for (int ch = 0; ch < 3; ch++) bad_bg += fabs(corner[ch] - want_bg[ch]) > 0.09; /* tint +-0.08 */
            if (R < 16) continue; /* too small for a surely fully covered pixel */
            double maxd = 0, mean[3] = {0};
            for (int y = 0; y < R; y++)
                for (int x = 0; x < R; x++) {
                    double d = 0;
                    for (int ch = 0; ch < 3; ch++) d += pow(PIX(ch, y, x) - corner[ch], 2);
                    maxd = fmax(maxd, sqrt(d));
                }
            int n = 0;
            for (int y = 0; y < R; y++)
                for (int x = 0; x < R; x++) {
                    double d = 0;
                    for (int ch = 0; ch < 3; ch++) d += pow(PIX(ch, y, x) - corner[ch], 2);
                    if (sqrt(d) >= 0.95 * maxd) {
                        for (int ch = 0; ch < 3; ch++) mean[ch] += PIX(ch, y, x);
                        n++;
                    }
                }
            for (int ch = 0; ch < 3; ch++) mean[ch] /= n;
            double err = 0;
            for (int ch = 0; ch < 3; ch++) err = fmax(err, fabs(mean[ch] - want_fg[ch]));
            if (err > 0.05) {
                bad_fg++;
                fprintf(stderr, "R %d sample %lld (%s): shape colour %.2f %.2f %.2f\n", R, (long long)i, cap, mean[0],
                        mean[1], mean[2]);
            }
            if (R < 64) continue;
            /* pixels more than half covered, against their bounding box */
            int count = 0, x0 = R, x1 = -1, y0 = R, y1 = -1, widest = 0, widest_y = 0;
            for (int y = 0; y < R; y++) {
                int row = 0;
                for (int x = 0; x < R; x++) {
                    double d = 0;
                    for (int ch = 0; ch < 3; ch++) d += pow(PIX(ch, y, x) - corner[ch], 2);
                    if (sqrt(d) > 0.5 * maxd) {
                        count++, row++;
                        x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1, y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1;
                    }
                }
                if (row > widest) widest = row, widest_y = y;
            }
#undef PIX
            const double fill = count / (double)((x1 - x0 + 1) * (y1 - y0 + 1));
            const double waist = (widest_y - y0) / (double)(y1 - y0); /* where the widest row is: 0 top, 1 bottom */
            bool ok = strcmp(shape, "square") == 0     ? fill > 0.95
                      : strcmp(shape, "circle") == 0   ? fill > 0.68 && fill < 0.86
                      : strcmp(shape, "triangle") == 0 ? fill > 0.38 && fill < 0.62 && waist > 0.85
                                                       : fill > 0.38 && fill < 0.62 && fabs(waist - 0.5) < 0.1;
            if (!ok) {
                bad_shape++;
                fprintf(stderr, "sample %lld (%s): fill ratio %.3f, widest at %.2f\n", (long long)i, cap, fill, waist);
            }
        }
        CHECKF(bad_range == 0, "R %d: %d values outside [-1, 1]", R, bad_range);
        CHECKF(bad_bg == 0, "R %d: %d background channels differ from the caption's colour", R, bad_bg);
        CHECKF(bad_fg == 0, "R %d: %d shapes not drawn in their class colour", R, bad_fg);
        CHECKF(bad_shape == 0, "R %d: %d shapes do not fill their box as their shape should", R, bad_shape);
        free(img);
        dataset_close(ds);
    }
}

/* ---- folders ---- */

static unsigned char wide[30][40][3]; /* 40 x 30: green margins 5 wide left and right, random inside */

static void test_folder_flat(void)
{
    enum { R = 8, per = 3 * R * R };
    make_dir("flat");
    unsigned char gray[R][R], rgb[R][R][3], rgba[R][R][4], idx[R][R], map[4][3] = {{255, 0, 0}, {0, 0, 255},
                                                                                  {10, 200, 30}, {128, 128, 128}};
    tk_fill_bytes(&rgb[0][0][0], sizeof rgb, 1);
    tk_fill_bytes(&rgba[0][0][0], sizeof rgba, 2);
    for (int y = 0; y < R; y++)
        for (int x = 0; x < R; x++) {
            gray[y][x] = (unsigned char)(x * 30 + y * 2);
            idx[y][x] = (unsigned char)((x + y) % 4);
            rgba[y][x][3] = x < 4 ? 0 : 255;
        }
    tk_fill_bytes(&wide[0][0][0], sizeof wide, 3);
    for (int y = 0; y < 30; y++)
        for (int x = 0; x < 40; x++)
            if (x < 5 || x >= 35) wide[y][x][0] = 0, wide[y][x][1] = 255, wide[y][x][2] = 0;
    tk_write_png(root, "flat/gray.png", R, R, PNG_FORMAT_GRAY, gray, NULL, 0);
    tk_write_png(root, "flat/palette.png", R, R, PNG_FORMAT_RGB_COLORMAP, idx, map, 4);
    tk_write_png(root, "flat/rgb.png", R, R, PNG_FORMAT_RGB, rgb, NULL, 0);
    tk_write_file(root, "flat/rgb.txt", "  a photo\nof red\t things \n");
    tk_write_png(root, "flat/rgba.png", R, R, PNG_FORMAT_RGBA, rgba, NULL, 0);
    tk_write_png(root, "flat/wide.png", 40, 30, PNG_FORMAT_RGB, wide, NULL, 0);
    unsigned char big[32 * 32 * 3];
    tk_fill_bytes(big, sizeof big, 4);
    tk_write_png(root, "flat/trunc.png", 32, 32, PNG_FORMAT_RGB, big, NULL, 0);
    struct stat sb;
    CHECK(stat(tk_path(root, "flat/trunc.png"), &sb) == 0 && sb.st_size > 3000);
    CHECK(truncate(tk_path(root, "flat/trunc.png"), sb.st_size / 2) == 0);
    tk_write_file(root, "flat/fake.png", "this is not a png, only text pretending to be one\n");
    tk_write_file(root, "flat/notes.md", "# ignored silently\n");
    tk_write_file(root, "flat/photo.jpg", "jpeg is not read");

    dataset *ds = NULL;
    float img[per];
    int64_t label;
    char cap[CAPTION_MAX];
    tk_capture_begin(root);
    st_status st = dataset_open_folder(tk_path(root, "flat"), R, &ds);
    int get_fail = 0;
    for (int64_t i = 0; ds && i < dataset_size(ds); i++) get_fail += dataset_get(ds, i, img, NULL, NULL) != ST_OK;
    captured = tk_capture_end();
    printf("     reported: %s", captured);
    CHECKF(st == ST_OK, "open: %s", st_error());
    if (st) return;
    CHECK(get_fail == 0);
    CHECKF(tk_count(captured, "trunc.png") == 1, "truncated file reported %d times", tk_count(captured, "trunc.png"));
    CHECKF(tk_count(captured, "fake.png") == 1, "text file reported %d times", tk_count(captured, "fake.png"));
    CHECKF(tk_count(captured, "photo.jpg") == 1, "jpeg reported %d times", tk_count(captured, "photo.jpg"));
    CHECKF(tk_count(captured, "notes.md") == 0 && tk_count(captured, ".txt") == 0, "a non-image was reported");
    CHECK(dataset_size(ds) == 5 && dataset_classes(ds) == 1 && strcmp(dataset_class_name(ds, 0), "flat") == 0);

    double want[per];
    /* 0 gray: expanded to three equal channels */
    CHECK(dataset_get(ds, 0, img, &label, cap) == ST_OK && label == 0 && cap[0] == 0);
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < R * R; k++) want[ch * R * R + k] = gray[k / R][k % R] / 255.0 * 2 - 1;
    CHECKF(tk_max_diff(img, want, per) < 1e-6, "gray: diff %g", tk_max_diff(img, want, per));
    /* 1 palette: expanded through the colour map */
    CHECK(dataset_get(ds, 1, img, NULL, NULL) == ST_OK);
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < R * R; k++) want[ch * R * R + k] = map[idx[k / R][k % R]][ch] / 255.0 * 2 - 1;
    CHECKF(tk_max_diff(img, want, per) < 1e-6, "palette: diff %g", tk_max_diff(img, want, per));
    /* 2 rgb, with its caption folded to single spaces */
    CHECK(dataset_get(ds, 2, img, NULL, cap) == ST_OK);
    CHECKF(strcmp(cap, "a photo of red things") == 0, "caption '%s'", cap);
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < R * R; k++) want[ch * R * R + k] = rgb[k / R][k % R][ch] / 255.0 * 2 - 1;
    CHECKF(tk_max_diff(img, want, per) < 1e-6, "rgb: diff %g", tk_max_diff(img, want, per));
    /* 3 rgba: transparent pixels become white, opaque ones keep their colour */
    CHECK(dataset_get(ds, 3, img, NULL, NULL) == ST_OK);
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < R * R; k++)
            want[ch * R * R + k] = (k % R < 4 ? 255 : rgba[k / R][k % R][ch]) / 255.0 * 2 - 1;
    CHECKF(tk_max_diff(img, want, per) < 1e-6, "rgba over white: diff %g", tk_max_diff(img, want, per));
    /* 4 wide: center crop 30 x 30 at x 5 (no green margin), area-averaged down to 8 x 8 */
    CHECK(dataset_get(ds, 4, img, NULL, NULL) == ST_OK);
    tk_ref_shrink(&wide[0][0][0], 40, 5, 0, 30, R, want);
    CHECKF(tk_max_diff(img, want, per) < 1e-5, "wide 40x30 -> 8: diff %g", tk_max_diff(img, want, per));
    dataset_close(ds);

    /* the same crop at its own size is the crop, pixel for pixel; grown, it is bilinear */
    static const int sizes[] = {30, 45, 12};
    for (int i = 0; i < 3; i++) {
        const int r = sizes[i], n = 3 * r * r;
        float *got = malloc(sizeof(float) * n);
        double *ref = malloc(sizeof(double) * n);
        tk_capture_begin(root);
        st = dataset_open_folder(tk_path(root, "flat"), r, &ds);
        captured = tk_capture_end();
        CHECK(st == ST_OK && dataset_get(ds, 4, got, NULL, NULL) == ST_OK);
        if (r >= 30) tk_ref_grow(&wide[0][0][0], 40, 5, 0, 30, r, ref);
        else tk_ref_shrink(&wide[0][0][0], 40, 5, 0, 30, r, ref);
        CHECKF(tk_max_diff(got, ref, n) < 1e-5, "wide 40x30 -> %d: diff %g", r, tk_max_diff(got, ref, n));
        if (r == 30) {
            int exact = 1;
            for (int ch = 0; ch < 3; ch++)
                for (int y = 0; y < 30; y++)
                    for (int x = 0; x < 30; x++)
                        exact &= got[(ch * 30 + y) * 30 + x] == (float)(wide[y][x + 5][ch] / 255.0 * 2 - 1);
            CHECK(exact);
        }
        dataset_close(ds);
        free(got);
        free(ref);
    }
}

/* A 6 x 4 image grown to 8: crop 4 x 4 at x 1, bilinear. A tall image crops vertically. */
static void test_folder_grow(void)
{
    make_dir("grow");
    unsigned char small[4][6][3], tall[9][5][3];
    tk_fill_bytes(&small[0][0][0], sizeof small, 5);
    tk_fill_bytes(&tall[0][0][0], sizeof tall, 6);
    tk_write_png(root, "grow/a.png", 6, 4, PNG_FORMAT_RGB, small, NULL, 0);
    tk_write_png(root, "grow/b.png", 5, 9, PNG_FORMAT_RGB, tall, NULL, 0);
    dataset *ds;
    CHECK(dataset_open_folder(tk_path(root, "grow"), 8, &ds) == ST_OK);
    float got[3 * 64];
    double want[3 * 64];
    CHECK(dataset_get(ds, 0, got, NULL, NULL) == ST_OK);
    tk_ref_grow(&small[0][0][0], 6, 1, 0, 4, 8, want);
    CHECKF(tk_max_diff(got, want, 3 * 64) < 1e-5, "6x4 -> 8: diff %g", tk_max_diff(got, want, 3 * 64));
    CHECK(dataset_get(ds, 1, got, NULL, NULL) == ST_OK);
    tk_ref_grow(&tall[0][0][0], 5, 0, 2, 5, 8, want);
    CHECKF(tk_max_diff(got, want, 3 * 64) < 1e-5, "5x9 -> 8: diff %g", tk_max_diff(got, want, 3 * 64));
    dataset_close(ds);
}

static void test_folder_classes(void)
{
    unsigned char px[4][4][3];
    tk_fill_bytes(&px[0][0][0], sizeof px, 7);
    make_dir("classes");
    make_dir("classes/cats");
    make_dir("classes/dogs");
    make_dir("classes/zebra"); /* empty: still a class, so labels do not shift */
    make_dir("classes/.hidden");
    tk_write_png(root, "classes/cats/a.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_png(root, "classes/cats/b.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(root, "classes/cats/b.txt", "a sleepy cat\n");
    tk_write_png(root, "classes/dogs/c.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(root, "classes/dogs/bad.png", "not a png");
    tk_write_file(root, "classes/dogs/orphan.txt", "a caption without its image");
    tk_write_png(root, "classes/.hidden/x.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_png(root, "classes/top.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    dataset *ds = NULL;
    tk_capture_begin(root);
    st_status st = dataset_open_folder(tk_path(root, "classes"), 4, &ds);
    captured = tk_capture_end();
    CHECKF(st == ST_OK, "%s", st_error());
    if (st) return;
    printf("     reported: %s", captured);
    CHECK(tk_count(captured, "bad.png") == 1 && tk_count(captured, "top.png") == 1 && tk_count(captured, "x.png") == 0);
    CHECK(dataset_size(ds) == 3 && dataset_classes(ds) == 3);
    CHECK(strcmp(dataset_class_name(ds, 0), "cats") == 0 && strcmp(dataset_class_name(ds, 1), "dogs") == 0 &&
          strcmp(dataset_class_name(ds, 2), "zebra") == 0);
    static const int64_t labels[] = {0, 0, 1};
    static const char *captions[] = {"cats", "a sleepy cat", "dogs"};
    for (int i = 0; i < 3; i++) {
        int64_t label = -1;
        char cap[CAPTION_MAX];
        CHECK(dataset_get(ds, i, NULL, &label, cap) == ST_OK);
        CHECKF(label == labels[i] && strcmp(cap, captions[i]) == 0, "sample %d: label %lld caption '%s'", i,
               (long long)label, cap);
    }
    dataset_close(ds);

    /* a long caption is cut below CAPTION_MAX bytes, never inside a UTF-8 character */
    make_dir("long");
    tk_write_png(root, "long/a.png", 4, 4, PNG_FORMAT_RGB, px, NULL, 0);
    char text[1200] = "";
    for (int i = 0; i < 400; i++) strcat(text, "\xc3\xa9"); /* 'e' acute, two bytes */
    tk_write_file(root, "long/a.txt", text);
    CHECK(dataset_open_folder(tk_path(root, "long"), 4, &ds) == ST_OK);
    char cap[CAPTION_MAX];
    CHECK(dataset_get(ds, 0, NULL, NULL, cap) == ST_OK);
    CHECKF(strlen(cap) == CAPTION_MAX - 2 && ((unsigned char)cap[strlen(cap) - 1] == 0xa9), "cut at %zu",
           strlen(cap));
    dataset_close(ds);
}

static void test_folder_failures(void)
{
    make_dir("allbad");
    tk_write_file(root, "allbad/fake.png", "no");
    unsigned char big[16 * 16 * 3];
    tk_fill_bytes(big, sizeof big, 8);
    tk_write_png(root, "allbad/cut.png", 16, 16, PNG_FORMAT_RGB, big, NULL, 0);
    CHECK(truncate(tk_path(root, "allbad/cut.png"), 100) == 0);
    tk_write_file(root, "allbad/readme.txt", "hello");
    dataset *ds = (dataset *)1;
    tk_capture_begin(root);
    st_status st = dataset_open_folder(tk_path(root, "allbad"), 8, &ds);
    captured = tk_capture_end();
    CHECK(st == ST_ERR_FORMAT && ds == NULL);
    CHECKF(strstr(st_error(), tk_path(root, "allbad")) != NULL, "message does not name the folder: %s", st_error());
    printf("     all bad -> %s\n", st_error());
    CHECK(tk_count(captured, "fake.png") == 1 && tk_count(captured, "cut.png") == 1);

    make_dir("empty");
    CHECK(dataset_open_folder(tk_path(root, "empty"), 8, &ds) == ST_ERR_FORMAT && strstr(st_error(), tk_path(root, "empty")));
    CHECK(dataset_open_folder(tk_path(root, "missing"), 8, &ds) == ST_ERR_IO && strstr(st_error(), tk_path(root, "missing")));
    CHECK(dataset_open_folder(tk_path(root, "flat"), 2, &ds) == ST_ERR_INVALID);
}

/* ---- iterator ---- */

static void test_iterator(void)
{
    enum { N = 37, B = 5, R = 8, per = 3 * R * R };
    dataset *ds;
    CHECK(dataset_open_builtin(R, N, 3, &ds) == ST_OK);
    data_iter *it, *again;
    CHECK(data_iter_create(ds, 42, &it) == ST_OK);
    data_position p0 = data_iter_position(it);
    CHECK(p0.epoch == 0 && p0.index == 0);

    /* two epochs in batches that straddle the boundary: each epoch is a permutation, and they differ */
    int64_t order[2 * N + B], labels[B];
    float images[B * per], one[per];
    char caps[B][CAPTION_MAX], cap[CAPTION_MAX];
    int mismatch = 0;
    for (int k = 0; k + B <= 2 * N + B; k += B) {
        CHECK(data_iter_next_batch(it, B, images, labels, caps, order + k) == ST_OK);
        for (int b = 0; b < B; b++) {
            int64_t label;
            dataset_get(ds, order[k + b], one, &label, cap);
            mismatch += memcmp(one, images + b * per, sizeof one) != 0 || label != labels[b] || strcmp(cap, caps[b]);
        }
    }
    CHECKF(mismatch == 0, "%d batch entries differ from dataset_get of their index", mismatch);
    for (int e = 0; e < 2; e++) {
        int seen[N] = {0}, ok = 1;
        for (int i = 0; i < N; i++) seen[order[e * N + i]]++;
        for (int i = 0; i < N; i++) ok &= seen[i] == 1;
        CHECKF(ok, "epoch %d does not visit every index once", e);
    }
    CHECK(memcmp(order, order + N, sizeof(int64_t) * N) != 0);
    data_position p = data_iter_position(it);
    CHECKF(p.epoch == 2 && p.index == B * ((2 * N + B) / B) - 2 * N, "position (%lld, %lld)", (long long)p.epoch,
           (long long)p.index);

    /* save, run on, restore into a fresh iterator: the same batches, bit for bit */
    CHECK(data_iter_create(ds, 42, &again) == ST_OK);
    for (int k = 0; k < 6; k++) data_iter_next_batch(it, B, NULL, NULL, NULL, NULL);
    const data_position saved = data_iter_position(it);
    enum { RUN = 12 };
    float *ref = malloc(sizeof(float) * RUN * B * per), *got = malloc(sizeof(float) * RUN * B * per);
    int64_t ref_l[RUN * B], got_l[RUN * B], ref_i[RUN * B], got_i[RUN * B];
    char(*ref_c)[CAPTION_MAX] = malloc(sizeof(*ref_c) * RUN * B);
    char(*got_c)[CAPTION_MAX] = malloc(sizeof(*got_c) * RUN * B);
    for (int k = 0; k < RUN; k++)
        data_iter_next_batch(it, B, ref + k * B * per, ref_l + k * B, ref_c + k * B, ref_i + k * B);
    CHECK(data_iter_seek(again, saved) == ST_OK);
    for (int k = 0; k < RUN; k++)
        data_iter_next_batch(again, B, got + k * B * per, got_l + k * B, got_c + k * B, got_i + k * B);
    CHECK(memcmp(ref, got, sizeof(float) * RUN * B * per) == 0);
    CHECK(memcmp(ref_l, got_l, sizeof ref_l) == 0 && memcmp(ref_i, got_i, sizeof ref_i) == 0);
    int differ = 0;
    for (int k = 0; k < RUN * B; k++) differ += strcmp(ref_c[k], got_c[k]) != 0;
    CHECK(differ == 0);
    CHECK(data_iter_position(it).epoch == data_iter_position(again).epoch &&
          data_iter_position(it).index == data_iter_position(again).index);
    /* and the same iterator seeking back */
    CHECK(data_iter_seek(it, saved) == ST_OK);
    CHECK(data_iter_next_batch(it, B, got, got_l, got_c, got_i) == ST_OK);
    CHECK(memcmp(ref, got, sizeof(float) * B * per) == 0 && memcmp(ref_i, got_i, sizeof(int64_t) * B) == 0);
    free(ref);
    free(got);
    free(ref_c);
    free(got_c);

    /* the end of an epoch is the start of the next; bad positions and batches are refused */
    CHECK(data_iter_seek(it, (data_position){3, N}) == ST_OK);
    p = data_iter_position(it);
    CHECK(p.epoch == 4 && p.index == 0);
    CHECK(data_iter_seek(it, (data_position){0, N + 1}) == ST_ERR_INVALID);
    CHECK(data_iter_seek(it, (data_position){-1, 0}) == ST_ERR_INVALID);
    CHECK(data_iter_next_batch(it, 0, NULL, NULL, NULL, NULL) == ST_ERR_INVALID);

    /* another seed shuffles differently */
    data_iter *other;
    CHECK(data_iter_create(ds, 43, &other) == ST_OK);
    int64_t o1[N], o2[N];
    CHECK(data_iter_seek(again, (data_position){0, 0}) == ST_OK);
    data_iter_next_batch(again, N, NULL, NULL, NULL, o1);
    data_iter_next_batch(other, N, NULL, NULL, NULL, o2);
    CHECK(memcmp(o1, o2, sizeof o1) != 0);
    data_iter_destroy(other);
    data_iter_destroy(again);
    data_iter_destroy(it);
    dataset_close(ds);

    /* the shuffle is uniform: over 6000 epochs of 4 samples each sample leads about 1500 times */
    CHECK(dataset_open_builtin(R, 4, 3, &ds) == ST_OK);
    CHECK(data_iter_create(ds, 9, &it) == ST_OK);
    int first[4] = {0}, last[4] = {0};
    for (int e = 0; e < 6000; e++) {
        int64_t idx[4];
        data_iter_next_batch(it, 4, NULL, NULL, NULL, idx);
        first[idx[0]]++;
        last[idx[3]]++;
    }
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= abs(first[i] - 1500) < 150 && abs(last[i] - 1500) < 150;
    CHECKF(ok, "first %d %d %d %d, last %d %d %d %d", first[0], first[1], first[2], first[3], last[0], last[1], last[2],
           last[3]);
    data_iter_destroy(it);
    dataset_close(ds);
}

/* ---- grids ---- */

static unsigned char *read_png(const char *path, png_uint_32 format, int *w, int *h)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&img, path)) return NULL;
    img.format = format;
    unsigned char *buf = malloc(PNG_IMAGE_SIZE(img));
    if (!png_image_finish_read(&img, NULL, buf, 0, NULL)) {
        free(buf);
        return NULL;
    }
    *w = (int)img.width;
    *h = (int)img.height;
    return buf;
}

static void test_grid(void)
{
    enum { N = 5, C = 3, H = 4, W = 6, COLS = 3 };
    float imgs[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++) imgs[i] = (float)((i * 37 % 256) / 127.5 - 1.0); /* 0..255 exactly */
    imgs[0] = -1.7f, imgs[1] = 2.5f, imgs[2] = NAN;
    const char *path = tk_path(root, "grid.png");
    CHECK(png_write_grid(path, imgs, N, C, H, W, COLS) == ST_OK);
    int w = 0, h = 0;
    unsigned char *px = read_png(path, PNG_FORMAT_RGB, &w, &h);
    CHECK(px != NULL);
    if (!px) return;
    CHECKF(w == COLS * W + (COLS - 1) * 2 && h == 2 * H + 2, "grid is %dx%d", w, h);
    int bad = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < C; ch++) {
                int col = x / (W + 2), row = y / (H + 2), tx = x % (W + 2), ty = y % (H + 2), k = row * COLS + col;
                int want = 255; /* gap or empty cell */
                if (tx < W && ty < H && k < N) {
                    int i = ((k * C + ch) * H + ty) * W + tx;
                    want = i == 0 || i == 2 ? 0 : i == 1 ? 255 : i * 37 % 256;
                }
                bad += px[(y * w + x) * 3 + ch] != want;
            }
    CHECKF(bad == 0, "%d grid values differ", bad);
    free(px);

    /* one channel: a gray PNG; nothing left beside it */
    CHECK(png_write_grid(path, imgs, 2, 1, H, W, 4) == ST_OK);
    px = read_png(path, PNG_FORMAT_GRAY, &w, &h);
    CHECK(px && w == 2 * W + 2 && h == H);
    if (px) CHECK(px[3] == 3 * 37 % 256 && px[W] == 255 && px[W + 1] == 255 && px[W + 2] == 24 * 37 % 256);
    free(px);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls %s | grep tmp)\"", root);
    CHECK(system(cmd) == 0);
    CHECK(png_write_grid(path, imgs, 0, 3, H, W, 1) == ST_ERR_INVALID);
    CHECK(png_write_grid(path, imgs, 1, 2, H, W, 1) == ST_ERR_INVALID);
    CHECK(png_write_grid(tk_path(root, "missing/grid.png"), imgs, 1, 3, H, W, 1) == ST_ERR_IO);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-data-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_builtin_basics();
    test_builtin_colours();
    test_folder_flat();
    test_folder_grow();
    test_folder_classes();
    test_folder_failures();
    test_iterator();
    test_grid();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
