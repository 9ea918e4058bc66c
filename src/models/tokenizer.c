/* The mmdit tokenizer: word-level and table-free. A caption's words (maximal runs of ASCII letters and digits,
 * lowercased; other bytes separate words) are hashed with 64-bit FNV-1a into rows 1 .. vocab-1 of the text
 * token table; row 0 is padding. Hashing needs no vocabulary file and gives every word, seen or not, a stable
 * row; two words may share a row (tests check that the built-in captions' words do not). */
#include "internal.h"

#include <ctype.h>

int64_t tokenize_caption(const char *caption, int64_t vocab, int64_t len, int64_t *ids)
{
    int64_t n = 0, cut = 0;
    for (const unsigned char *p = (const unsigned char *)caption; *p;) {
        if (!isalnum(*p) || *p >= 128) {
            p++;
            continue;
        }
        uint64_t h = 14695981039346656037ull;
        for (; *p && *p < 128 && isalnum(*p); p++) h = (h ^ (uint64_t)tolower(*p)) * 1099511628211ull;
        if (n < len) ids[n++] = 1 + (int64_t)(h % (uint64_t)(vocab - 1));
        else cut++;
    }
    for (; n < len; n++) ids[n] = 0;
    return cut;
}
