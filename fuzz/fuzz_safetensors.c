/* Fuzz target: the safetensors reader on arbitrary file contents. A file it accepts is read back through every
 * accessor, written again with sft_write and reopened: the copy must hold the same tensors, byte for byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_files.h"
#include "segtrain/safetensors.h"

static void fail(const char *what, const char *name)
{
    fprintf(stderr, "fuzz_safetensors: %s (tensor '%s')\n", what, name);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sft_file *f;
    if (sft_open(fuzz_write("in.safetensors", data, size), &f)) return 0;
    (void)sft_metadata(f, "format");
    int n = sft_count(f);
    sft_entry *e = calloc((size_t)n + 1, sizeof *e);
    for (int i = 0; i < n; i++) {
        const sft_tensor *t = sft_at(f, i);
        if (sft_find(f, t->name) != t) fail("sft_find does not find what sft_at lists", t->name);
        size_t numel = t->nbytes / sft_dtype_size(t->dtype);
        void *buf = malloc(numel ? numel * (t->dtype == SFT_I64 ? 8 : 4) : 1);
        const int bytes = t->dtype == SFT_U8 || t->dtype == SFT_I8; /* packed data: read as the bytes they are */
        st_status st = bytes ? ST_OK
                       : t->dtype == SFT_I64 ? sft_read_i64(f, t->name, t->ndim, t->shape, buf)
                                             : sft_read_f32(f, t->name, t->ndim, t->shape, buf);
        if (st) fail("an accepted tensor cannot be read with its own shape", t->name);
        free(buf);
        e[i] = (sft_entry){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    char copy_path[512];
    snprintf(copy_path, sizeof copy_path, "%s", fuzz_path("copy.safetensors"));
    if (sft_write(copy_path, e, n, NULL, 0)) fail("an accepted file cannot be written again", "");
    sft_file *g;
    if (sft_open(copy_path, &g)) fail("a file sft_write wrote is refused", "");
    if (sft_count(g) != n) fail("the copy has another tensor count", "");
    for (int i = 0; i < n; i++) {
        const sft_tensor *a = sft_at(f, i), *b = sft_find(g, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
            memcmp(b->shape, a->shape, sizeof a->shape) || (a->nbytes && memcmp(a->data, b->data, a->nbytes)))
            fail("the copy differs", a->name);
    }
    sft_close(g);
    free(e);
    sft_close(f);
    return 0;
}
