/* The key registry: one row per configuration key. It is the single source of truth for parsing, validation,
 * defaults and docs/CONFIG.md, so adding a key means adding one row to keys.c and nothing else.
 * Private to src/config/ (and tests, which check every row). */
#ifndef SEGTRAIN_CONFIG_KEYS_H
#define SEGTRAIN_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cfg_type {
    CFG_BOOL,
    CFG_INT,
    CFG_FLOAT,
    CFG_STRING,  /* free text, or one of `choices` */
    CFG_SIZE,    /* a byte size as text ("24GiB"), read with config_bytes(); "" = unlimited */
    CFG_INT_LIST /* a list of integers; min/max bound each element */
} cfg_type;

typedef enum cfg_section { SEC_MODEL, SEC_CHECKPOINTING, SEC_MEMORY, SEC_TRAINING, SEC_COUNT } cfg_section;

typedef struct cfg_key {
    const char *name;
    const char *alias;   /* another accepted name (SimpleTuner's), or NULL */
    cfg_type type;
    const char *def;     /* the default, written as a command line would give it */
    const char *choices; /* CFG_STRING only: "a|b|c", or NULL for free text (or a name a higher layer checks) */
    double min, max;     /* numbers and list elements, inclusive; -INFINITY / INFINITY = unbounded */
    cfg_section section;
    const char *st;      /* SimpleTuner counterpart: NULL none; "=" same name, "=..." same name plus a note;
                          * else Markdown text */
    const char *doc;     /* one or two sentences: what it does, and what a special default means */
    unsigned flags;      /* CFG_OPEN_MIN, CFG_OPEN_MAX: that bound itself is refused (0 < epsilon, beta < 1);
                          * CFG_EMPTY_CLEARS: "" puts the key back to its default, as null does */
} cfg_key;

#define CFG_OPEN_MIN 1u
#define CFG_OPEN_MAX 2u
#define CFG_EMPTY_CLEARS 4u

extern const cfg_key cfg_keys[];
extern const int cfg_key_count;

/* A value SimpleTuner accepts for a choice key that is not one of segtrain's own names. `becomes` is the
 * segtrain value it is read as (NULL: refused); `note` is NULL where the meaning is exactly the same, else what
 * differs (taken) or why it is refused and what is nearest (refused). */
typedef struct cfg_value_alias {
    const char *key, *value, *becomes, *note;
} cfg_value_alias;

extern const cfg_value_alias cfg_value_aliases[];
extern const int cfg_value_alias_count;

/* SimpleTuner keys segtrain does not read, by what ignoring them costs. A name ending in '*' is a prefix.
 * Unknown keys in neither list are taken to change the result: the safe side for a warning. */
extern const char *const cfg_speed_only_keys[];  /* only SimpleTuner's speed or memory (NULL-terminated) */
extern const char *const cfg_report_only_keys[]; /* only what is reported or published (NULL-terminated) */
/* SimpleTuner keys segtrain does not read, and the value at which SimpleTuner does what segtrain does anyway
 * ("false", "l2", ...; a number as %g writes it): given with that value, ignoring the key changes nothing, so the
 * warning leaves it out. {NULL, NULL} ends the table. */
typedef struct cfg_neutral {
    const char *key, *value;
} cfg_neutral;
extern const cfg_neutral cfg_neutral_values[];
extern const char *const cfg_section_names[SEC_COUNT];

/* What config.c's messages and doc.c's docs/CONFIG.md both write about a key (config.c): */
const char *cfg_type_name(cfg_type t);
void cfg_range_text(const cfg_key *k, char *buf, size_t n); /* " in [a, b)", " > a", " <= b" or "" */

#endif
