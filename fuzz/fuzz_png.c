/* Fuzz target: the PNG loader (src/train/data.c) on arbitrary file contents, through the public door that reads
 * PNGs: a folder dataset holding the one file, which dataset_open_folder decodes once to check, then dataset_get
 * decodes again, crops and resizes (to 8x8: both shrinking and growing are reached by the input's own size). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_files.h"
#include "segtrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s", fuzz_path("images"));
        if (mkdir(dir, 0755) != 0) abort();
    }
    fuzz_write("images/x.png", data, size);
    dataset *ds;
    if (dataset_open_folder(dir, 8, &ds)) return 0; /* refused: reported on stderr, fine */
    float image[3 * 8 * 8];
    int64_t label;
    char caption[CAPTION_MAX];
    if (dataset_size(ds) != 1 || dataset_get(ds, 0, image, &label, caption)) {
        fprintf(stderr, "fuzz_png: an image the folder accepted does not load\n");
        abort();
    }
    for (int i = 0; i < 3 * 8 * 8; i++)
        if (!(image[i] >= -1.0f && image[i] <= 1.0f)) {
            fprintf(stderr, "fuzz_png: pixel %d is %g, outside [-1, 1]\n", i, image[i]);
            abort();
        }
    dataset_close(ds);
    return 0;
}
