/* The built-in stand-in for a text encoder, for runs without a cache of real encoder outputs. A caption's words
 * (maximal runs of ASCII letters and digits, lowercased; other bytes separate words) are hashed with 64-bit
 * FNV-1a into rows 1 .. vocab-1 of a word table; row 0 is padding. Hashing needs no vocabulary file and gives
 * every word, seen or not, a stable row; two words may share a row (tests check that the built-in captions' words
 * do not). A row's vectors are counter-based random numbers, so the table is never stored. */
#include "models/core/internal.h"

#include <ctype.h>

#include "segtrain/rng.h"

#define WORD_TABLE_SEED 0x5e97ea1full

/* The row of the next word at or after *p, advancing *p past it; 0 when no word is left. */
static int64_t next_word(const unsigned char **p, int64_t vocab)
{
    while (**p && (!isalnum(**p) || **p >= 128)) (*p)++;
    if (!**p) return 0;
    uint64_t h = 14695981039346656037ull;
    for (; **p && **p < 128 && isalnum(**p); (*p)++) h = (h ^ (uint64_t)tolower(**p)) * 1099511628211ull;
    return 1 + (int64_t)(h % (uint64_t)(vocab - 1));
}

int64_t encode_caption(const char *caption, int64_t vocab, int64_t len, int64_t dim, int64_t pooled_dim, float *seq,
                       float *pooled)
{
    const unsigned char *p = (const unsigned char *)caption;
    int64_t words = 0;
    for (int64_t j = 0; j < pooled_dim; j++) pooled[j] = 0.0f;
    for (int64_t l = 0; l < len; l++) {
        const int64_t id = next_word(&p, vocab);
        for (int64_t j = 0; j < dim; j++)
            seq[l * dim + j] = id ? (float)rng_normal(WORD_TABLE_SEED, (uint64_t)id, (uint64_t)j) : 0.0f;
        if (!id) continue;
        words++;
        for (int64_t j = 0; j < pooled_dim; j++) pooled[j] += (float)rng_normal(WORD_TABLE_SEED, (uint64_t)id, (uint64_t)(dim + j));
    }
    for (int64_t j = 0; j < pooled_dim && words; j++) pooled[j] /= (float)words;
    return words;
}

int64_t encode_caption_ids(const char *const *parts, int n_parts, int64_t vocab, int64_t len, float *ids)
{
    int64_t l = 0;
    for (int k = 0; k < n_parts; k++)
        for (const unsigned char *p = (const unsigned char *)parts[k]; l < len;) {
            const int64_t id = next_word(&p, vocab);
            if (!id) break;
            ids[l++] = (float)id;
        }
    for (int64_t j = l; j < len; j++) ids[j] = 0.0f;
    return l;
}
