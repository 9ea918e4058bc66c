/* Every parity fixture has its bf16 yardstick (scripts/bf16_yardstick.py; docs/FIXTURES.md), well-formed and made
 * from the fixture as it is: per parity file on disk the loss it was measured against is the file's, and it lists
 * exactly the tensors that file checks (pred, loss, every gradient), so that a test comparing segtrain's bf16 error
 * with 2x PyTorch's finds every one of them. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/safetensors.h"
#include "testkit.h"

#define FIXTURES SEGTRAIN_SOURCE_DIR "/tests/fixtures"

/* The yardstick's account of one parity file against the file: its loss, then every checked tensor listed and
 * nothing else. Returns whether the file exists. */
static bool check_file(const char *fixture, const tk_yardstick *y, const char *file)
{
    char path[600];
    snprintf(path, sizeof path, FIXTURES "/%s/%s.safetensors", fixture, file);
    sft_file *f;
    if (sft_open(path, &f) != ST_OK) {
        CHECKF(tk_yardstick_count(y, file) == 0, "%s: the yardstick has %s, the fixture has no such file", fixture,
               file);
        return false;
    }
    const sft_tensor *lt = sft_find(f, "loss");
    float loss = NAN;
    CHECKF(lt && sft_read_f32(f, "loss", lt->ndim, lt->shape, &loss) == ST_OK, "%s: %s has no loss", fixture, path);
    CHECKF(tk_yardstick_reference_loss(y, file) == loss, "%s: the yardstick of %s was measured at loss %.9g, the file "
           "has %.9g: rerun scripts/bf16_yardstick.py %s", fixture, file, tk_yardstick_reference_loss(y, file), loss,
           fixture);
    int checked = 2, missing = 0;
    const char *first_missing = "";
    for (int i = 0; i < sft_count(f); i++) {
        const char *name = sft_at(f, i)->name, *param = NULL;
        if (!strncmp(name, "grad.", 5)) param = name + 5;
        else if (!strncmp(name, "grad_dy.", 8)) param = name + 8; /* a factored gradient, listed as grad.<name> */
        if (!param) continue;
        char key[400];
        snprintf(key, sizeof key, "grad.%s", param);
        checked++;
        if (tk_yardstick_error(y, file, key) < 0 && !missing++) first_missing = name;
    }
    CHECKF(!missing && tk_yardstick_count(y, file) == checked, "%s, %s: the file checks %d tensors, the yardstick "
           "lists %d, %d of them missing (first %s)", fixture, file, checked, tk_yardstick_count(y, file), missing,
           first_missing);
    printf("  %-16s %-9s %4d tensors, PyTorch bf16: pred %.2g, loss %.2g\n", fixture, file, checked,
           tk_yardstick_error(y, file, "pred"), tk_yardstick_error(y, file, "loss"));
    sft_close(f);
    return true;
}

int main(void)
{
    struct dirent **entries = NULL;
    const int n = scandir(FIXTURES, &entries, NULL, alphasort);
    CHECK(n > 0);
    int fixtures = 0;
    for (int i = 0; i < n; i++) {
        const char *name = entries[i]->d_name;
        char path[600];
        snprintf(path, sizeof path, FIXTURES "/%s/parity.safetensors", name);
        FILE *probe = fopen(path, "rb");
        if (probe) { /* a parity fixture */
            fclose(probe);
            const char *why = NULL;
            tk_yardstick *y = tk_yardstick_load(name, &why);
            CHECKF(y, "%s: bf16 yardstick: %s", name, why);
            const int files = y ? check_file(name, y, "parity") + check_file(name, y, "parity_hw") : 1;
            CHECKF(files == 1 || files == 2, "%s: no parity file", name);
            tk_yardstick_free(y);
            fixtures++;
        }
        free(entries[i]);
    }
    free(entries);
    CHECKF(fixtures >= 44, "%d parity fixtures found", fixtures);
    printf("%d parity fixtures, each with its bf16 yardstick\n", fixtures);
    return tk_finish();
}
