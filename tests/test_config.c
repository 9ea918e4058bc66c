/* The configuration module: SimpleTuner-style JSON, --set overrides, every validation message, and the check
 * that docs/CONFIG.md matches the key registry.
 *
 * Usage: test_config [SOURCE_DIR | PATH_TO_CONFIG_MD]   checks (docs/CONFIG.md found under SOURCE_DIR; without an
 *                                                       argument under SEGTRAIN_SOURCE_DIR if defined, else ".")
 *        test_config --write PATH                       writes the generated reference to PATH and exits */
#include "segtrain/config.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/config/keys.h" /* the registry, to check every row; private to src/config */
#include "testkit.h"

#define REGENERATE "build/test_config --write docs/CONFIG.md"

static char *write_temp(const char *text, size_t len);

static config *parse_ok(int line, const char *json)
{
    config *c = NULL;
    st_status s = config_parse(json, "config.json", &c);
    CHECKF(s == ST_OK && c, "line %d: parse failed: %s\n  in: %s", line, st_error(), json);
    return c;
}
#define PARSE_OK(json) parse_ok(__LINE__, json)

/* Checks the status and that st_error() contains every given piece (a NULL-terminated list). */
static void expect_fail(int line, st_status got, st_status want, ...)
{
    CHECKF(got == want, "line %d: status %d (%s), want %d; message: %s", line, (int)got, st_status_name(got),
           (int)want, st_error());
    va_list ap;
    va_start(ap, want);
    for (const char *piece; (piece = va_arg(ap, const char *));)
        CHECKF(strstr(st_error(), piece), "line %d: message lacks '%s': %s", line, piece, st_error());
    va_end(ap);
}
#define EXPECT_FAIL(got, want, ...) expect_fail(__LINE__, got, want, __VA_ARGS__, (const char *)NULL)

/* Parses json expecting failure; the config pointer must come back NULL. */
static st_status parse_bad(const char *json)
{
    config *c = (config *)1;
    st_status s = config_parse(json, "config.json", &c);
    CHECKF(c == NULL, "a failed parse must leave *out NULL (%s)", json);
    if (s == ST_OK) config_free(c);
    return s;
}

static void test_defaults(void)
{
    config *c = PARSE_OK("{}");
    if (!c) return;
    for (int i = 0; i < cfg_key_count; i++)
        CHECKF(!config_is_set(c, cfg_keys[i].name), "%s set without being given", cfg_keys[i].name);
    CHECK(strcmp(config_string(c, "model_family"), "dit") == 0);
    CHECK(strcmp(config_string(c, "model_preset"), "dit-tiny") == 0);
    CHECK(strcmp(config_string(c, "attention_mechanism"), "flash") == 0);
    CHECK(config_int(c, "num_classes") == 0);
    CHECK(config_bool(c, "gradient_checkpointing") == false);
    CHECK(strcmp(config_string(c, "gradient_checkpointing_backend"), "torch") == 0);
    CHECK(config_int(c, "gradient_checkpointing_interval") == 1);
    CHECK(config_int(c, "gradient_checkpointing_segment_stride") == 0);
    CHECK(config_bool(c, "gradient_checkpointing_offload_attention") == false);
    size_t n = 99;
    CHECK(config_int_list(c, "capture_hidden_states", &n) == NULL && n == 0);
    size_t bytes = 1;
    CHECK(config_bytes(c, "device_memory", &bytes) == ST_OK && bytes == 0);
    CHECK(strcmp(config_string(c, "host_memory"), "") == 0);
    CHECK(config_int(c, "train_batch_size") == 1);
    CHECK(config_float(c, "learning_rate") == 1e-4);
    CHECK(config_int(c, "seed") == 0);
    CHECK(strcmp(config_string(c, "optimizer"), "adamw") == 0);
    CHECK(config_int(c, "checkpoint_step_interval") == 500);
    CHECK(strcmp(config_string(c, "data_dir"), "") == 0);
    CHECK(config_int(c, "num_threads") == 0);
    CHECK(config_warning(c) == NULL);
    config_free(c);
}

/* Every row is well formed, and every default passes the validation a user's value gets, except the one
 * default that stands for "unset" (stride 0 = the interval), which a user may not give. */
static void test_registry(void)
{
    config *c = PARSE_OK("{}");
    if (!c) return;
    for (int i = 0; i < cfg_key_count; i++) {
        const cfg_key *k = &cfg_keys[i];
        CHECKF(k->doc && k->doc[0] && (unsigned)k->section < SEC_COUNT, "%s: doc or section missing", k->name);
        CHECKF(!k->choices || k->type == CFG_STRING, "%s: choices on a non-string key", k->name);
        int clashes = 0;
        for (int j = 0; j < cfg_key_count; j++) {
            const char *a = cfg_keys[j].alias;
            clashes += j != i && strcmp(k->name, cfg_keys[j].name) == 0;
            clashes += a && strcmp(k->name, a) == 0;
        }
        CHECKF(clashes == 0, "%s registered twice", k->name);
        char set[256];
        snprintf(set, sizeof set, "%s=%s", k->name, k->def);
        st_status s = config_set(c, set);
        bool unset_marker = strcmp(k->name, "gradient_checkpointing_segment_stride") == 0;
        CHECKF((s == ST_OK) != unset_marker, "default of %s: config_set(\"%s\") gave %s", k->name, set, st_error());
    }
    config_free(c);
}

static void test_dashes_and_duplicates(void)
{
    config *c = PARSE_OK("{\"--seed\": 7, \"--gradient_checkpointing\": \"true\", \"train_batch_size\": 2}");
    if (c) {
        CHECK(config_int(c, "seed") == 7 && config_is_set(c, "seed"));
        CHECK(config_bool(c, "gradient_checkpointing"));
        CHECK(config_int(c, "train_batch_size") == 2);
        CHECK(!config_is_set(c, "learning_rate"));
        config_free(c);
    }
    EXPECT_FAIL(parse_bad("{\"--seed\": 1, \"seed\": 1}"), ST_ERR_INVALID, "config.json: ", "seed is given twice",
                "\"--seed\"", "\"seed\"");
    EXPECT_FAIL(parse_bad("{\"gradient_checkpointing\": true, \"--gradient_checkpointing\": false}"), ST_ERR_INVALID,
                "\"gradient_checkpointing\" and \"--gradient_checkpointing\"");
    EXPECT_FAIL(parse_bad("{\"seed\": 1, \"seed\": 2}"), ST_ERR_INVALID, "seed is given twice");
}

static void test_trailing_commas(void)
{
    config *c = PARSE_OK("{\"seed\": 3,}");
    if (c) {
        CHECK(config_int(c, "seed") == 3);
        config_free(c);
    }
    c = PARSE_OK("{\n  \"capture_hidden_states\": [1, 2,\n  ],\n  \"extra\": {\"a\": [1,], \"b\": {\"c\": 2,},},\n}\n");
    if (c) {
        size_t n;
        const int64_t *l = config_int_list(c, "capture_hidden_states", &n);
        CHECK(n == 2 && l[0] == 1 && l[1] == 2);
        CHECK(config_warning(c) && strstr(config_warning(c), "extra"));
        config_free(c);
    }
    /* commas, brackets and escaped quotes inside strings are content, not syntax */
    c = PARSE_OK("{\"output_dir\": \"a,}b,]c\", \"data_dir\": \"q\\\",]\", \"lora_target\": \"x\\\\\",}");
    if (c) {
        CHECKF(strcmp(config_string(c, "output_dir"), "a,}b,]c") == 0, "got %s", config_string(c, "output_dir"));
        CHECKF(strcmp(config_string(c, "data_dir"), "q\",]") == 0, "got %s", config_string(c, "data_dir"));
        CHECKF(strcmp(config_string(c, "lora_target"), "x\\") == 0, "got %s", config_string(c, "lora_target"));
        config_free(c);
    }
    EXPECT_FAIL(parse_bad("{\"capture_hidden_states\": [,]}"), ST_ERR_FORMAT, "config.json:1:");
    EXPECT_FAIL(parse_bad("{\"seed\": 1,,}"), ST_ERR_FORMAT, "config.json:1:");
    EXPECT_FAIL(parse_bad("{,}"), ST_ERR_FORMAT, "config.json:1:");
    /* a stripped comma keeps positions: the stray brace is still reported at line 4, column 1 */
    EXPECT_FAIL(parse_bad("{\n  \"seed\": 1,\n}\n}"), ST_ERR_FORMAT, "config.json:4:1:");
}

static void test_malformed(void)
{
    EXPECT_FAIL(parse_bad("{\n  \"seed\": 1,\n  \"x\": tru\n}"), ST_ERR_FORMAT, "config.json:3:8: malformed JSON");
    EXPECT_FAIL(parse_bad("{\n  \"seed\": 1\n  \"x\": 2\n}"), ST_ERR_FORMAT, "config.json:3:3: malformed JSON");
    EXPECT_FAIL(parse_bad("{\"seed\": 1"), ST_ERR_FORMAT, "config.json:1:11:", "end of text");
    EXPECT_FAIL(parse_bad(""), ST_ERR_FORMAT, "config.json:1:1:");
    EXPECT_FAIL(parse_bad("[1, 2]"), ST_ERR_FORMAT, "config.json: the top level must be a JSON object",
                "a list is a SimpleTuner multidatabackend.json");
    EXPECT_FAIL(parse_bad("{} {}"), ST_ERR_FORMAT, "config.json:1:4:");
    config *c = NULL;
    EXPECT_FAIL(config_parse("{", NULL, &c), ST_ERR_FORMAT, "config:1:2:");
}

/* One JSON value for one key: accepted with the expected value, or refused with the key, value and what is
 * valid in the message. */
static void value_ok(int line, const char *key, const char *json_value, const char *want)
{
    char json[512], got[128] = "?";
    snprintf(json, sizeof json, "{\"%s\": %s}", key, json_value);
    config *c = parse_ok(line, json);
    if (!c) return;
    int i = 0;
    while (strcmp(cfg_keys[i].name, key) != 0) i++;
    switch (cfg_keys[i].type) {
    case CFG_BOOL: snprintf(got, sizeof got, "%s", config_bool(c, key) ? "true" : "false"); break;
    case CFG_INT: snprintf(got, sizeof got, "%lld", (long long)config_int(c, key)); break;
    case CFG_FLOAT: snprintf(got, sizeof got, "%g", config_float(c, key)); break;
    default: snprintf(got, sizeof got, "%s", config_string(c, key)); break;
    }
    CHECKF(strcmp(got, want) == 0 && config_is_set(c, key), "line %d: %s: %s read as %s, want %s", line, key,
           json_value, got, want);
    config_free(c);
}
#define VALUE_OK(key, json_value, want) value_ok(__LINE__, key, json_value, want)

static void value_bad(int line, const char *key, const char *json_value, const char *valid)
{
    char json[512], want[4096];
    snprintf(json, sizeof json, "{\"%s\": %s}", key, json_value);
    snprintf(want, sizeof want, "config.json: %s: %s is not %s", key, json_value, valid);
    st_status s = parse_bad(json);
    CHECKF(s == ST_ERR_INVALID && strcmp(st_error(), want) == 0, "line %d: got %d \"%s\"\n  want \"%s\"", line,
           (int)s, st_error(), want);
}
#define VALUE_BAD(key, json_value, valid) value_bad(__LINE__, key, json_value, valid)

#define BOOL_VALID "a bool (true, false, \"true\", \"false\", 1 or 0)"

static void test_typed_values(void)
{
    const char *gc = "gradient_checkpointing";
    VALUE_OK(gc, "true", "true"), VALUE_OK(gc, "false", "false"), VALUE_OK(gc, "\"true\"", "true");
    VALUE_OK(gc, "\"false\"", "false"), VALUE_OK(gc, "\"True\"", "true"), VALUE_OK(gc, "\"1\"", "true");
    VALUE_OK(gc, "\"0\"", "false"), VALUE_OK(gc, "1", "true"), VALUE_OK(gc, "0", "false");
    VALUE_BAD(gc, "\"yes\"", BOOL_VALID), VALUE_BAD(gc, "2", BOOL_VALID), VALUE_BAD(gc, "[]", BOOL_VALID);

    VALUE_OK("train_batch_size", "4", "4"), VALUE_OK("train_batch_size", "\"4\"", "4");
    VALUE_OK("train_batch_size", "4.0", "4"), VALUE_OK("seed", "\"42\"", "42");
    VALUE_BAD("train_batch_size", "4.5", "an integer in [1, 65536]");
    VALUE_BAD("train_batch_size", "\"four\"", "an integer in [1, 65536]");
    VALUE_BAD("train_batch_size", "\"4x\"", "an integer in [1, 65536]");
    VALUE_BAD("train_batch_size", "\" 4\"", "an integer in [1, 65536]");
    VALUE_BAD("train_batch_size", "true", "an integer in [1, 65536]");
    VALUE_BAD("train_batch_size", "0", "an integer in [1, 65536]");
    

    VALUE_OK("learning_rate", "1e-4", "0.0001"), VALUE_OK("learning_rate", "\"1e-4\"", "0.0001");
    VALUE_OK("learning_rate", "\"0.0003\"", "0.0003"), VALUE_OK("learning_rate", "3", "3");
    VALUE_BAD("learning_rate", "\"fast\"", "a number > 0");
    VALUE_BAD("learning_rate", "\"nan\"", "a number > 0");
    VALUE_BAD("learning_rate", "\"inf\"", "a number > 0");
    VALUE_BAD("learning_rate", "-1", "a number > 0");
    /* one rule for number and integer keys given as text: decimal only, the whole string */
    static const char *const not_decimal[] = {"\"0x10\"", "\"0X1p-3\"", "\"infinity\"", "\"-nan\"", "\"1e\"",
                                              "\"1e-4 \"", "\" 1e-4\"", "\".\"", "\"\"", "\"4x\"", "\"1,5\""};
    for (size_t i = 0; i < sizeof not_decimal / sizeof *not_decimal; i++) {
        VALUE_BAD("learning_rate", not_decimal[i], "a number > 0");
        VALUE_BAD("lr_power", not_decimal[i], "a number in [0, 1000]");
        VALUE_BAD("train_batch_size", not_decimal[i], "an integer in [1, 65536]");
    }
    VALUE_OK("learning_rate", "\"+2e-4\"", "0.0002"), VALUE_OK("learning_rate", "\".5\"", "0.5");
    VALUE_OK("learning_rate", "\"5.\"", "5"), VALUE_OK("learning_rate", "\"1E+2\"", "100");
    VALUE_OK("lr_power", "\"0\"", "0"), VALUE_OK("lr_power", "\"-0\"", "-0");
    /* optimizer numbers whose bound would divide by zero: refused at the bound, taken just inside it */
    VALUE_BAD("adam_epsilon", "0", "a number > 0"), VALUE_BAD("adam_epsilon", "\"0.0\"", "a number > 0");
    VALUE_BAD("adam_epsilon", "-1", "a number > 0"), VALUE_OK("adam_epsilon", "1e-30", "1e-30");
    VALUE_BAD("learning_rate", "0", "a number > 0"), VALUE_OK("learning_rate", "1e-12", "1e-12");
    VALUE_BAD("adam_beta1", "1", "a number in [0, 1)"), VALUE_BAD("adam_beta2", "\"1.0\"", "a number in [0, 1)");
    VALUE_OK("adam_beta1", "0", "0"), VALUE_OK("adam_beta2", "0.9999", "0.9999");
    VALUE_BAD("adam_weight_decay", "-0.01", "a number >= 0"), VALUE_OK("adam_weight_decay", "0", "0");
    EXPECT_FAIL(parse_bad("{\"optimizer_beta2\": 1}"), ST_ERR_INVALID, "adam_beta2: 1 is not a number in [0, 1)");
    /* JSON numbers past a double's range: cJSON reads them as inf and would print null */
    EXPECT_FAIL(parse_bad("{\"train_batch_size\": 1e400}"), ST_ERR_INVALID,
                "train_batch_size: a number too large for a double is not an integer in [1, 65536]");
    EXPECT_FAIL(parse_bad("{\"learning_rate\": 1e999}"), ST_ERR_INVALID, "learning_rate: a number too large");
    EXPECT_FAIL(parse_bad("{\"learning_rate\": \"1e999\"}"), ST_ERR_INVALID, "learning_rate: \"1e999\" is not");
    VALUE_BAD("adam_beta1", "1.5", "a number in [0, 1)");
    VALUE_BAD("adam_beta2", "\"-0.1\"", "a number in [0, 1)");

    VALUE_OK("output_dir", "\"runs/a\"", "runs/a");
    VALUE_BAD("output_dir", "5", "a string");

    /* null = the default, and does not count as given */
    config *c = PARSE_OK("{\"seed\": null, \"--optimizer\": null}");
    if (c) {
        CHECK(config_int(c, "seed") == 0 && !config_is_set(c, "seed"));
        config_free(c);
    }
    /* a long value is shortened in the message, never overflowing it */
    char json[600];
    snprintf(json, sizeof json, "{\"optimizer\": \"%0300d\"}", 7);
    EXPECT_FAIL(parse_bad(json), ST_ERR_INVALID, "config.json: optimizer: \"000", "...", "one of adamw, lion");
}

/* The checkpointing controls of ../shared/spec/checkpointing.md, and the other keys with choices. */
static void test_checkpointing_and_choices(void)
{
    VALUE_BAD("gradient_checkpointing_interval", "0", "an integer >= 1");
    VALUE_BAD("gradient_checkpointing_interval", "\"0\"", "an integer >= 1");
    VALUE_BAD("gradient_checkpointing_interval", "-3", "an integer >= 1");
    VALUE_OK("gradient_checkpointing_interval", "\"3\"", "3");
    VALUE_BAD("gradient_checkpointing_segment_stride", "0", "an integer >= 1");
    VALUE_OK("gradient_checkpointing_segment_stride", "4", "4");
    const char *backends[] = {"torch", "torch-ffn", "unsloth", "unsloth-ffn"};
    for (int i = 0; i < 4; i++) {
        char v[32];
        snprintf(v, sizeof v, "\"%s\"", backends[i]);
        VALUE_OK("gradient_checkpointing_backend", v, backends[i]);
    }
    const char *backend_valid = "one of torch, torch-ffn, unsloth, unsloth-ffn";
    VALUE_BAD("gradient_checkpointing_backend", "\"foo\"", backend_valid);
    VALUE_BAD("gradient_checkpointing_backend", "\"Torch\"", backend_valid);
    VALUE_BAD("gradient_checkpointing_backend", "1", backend_valid);
    VALUE_OK("gradient_checkpointing_offload_attention", "\"true\"", "true");

    VALUE_BAD("optimizer", "\"adam\"", "one of adamw, lion");
    VALUE_OK("model_family", "\"flux\"", "flux"); /* a SimpleTuner family: the model layer says what it needs */
    VALUE_OK("model_preset", "\"dit-l2\"", "dit-l2"); /* a name the models layer checks (test_families) */
    VALUE_BAD("attention_mechanism", "\"sdpa\"", "one of math, flash");
    VALUE_OK("lr_scheduler", "\"cosine\"", "cosine");
}

/* SimpleTuner's own values of choice keys: read as segtrain's where they mean the same, with a note where they
 * differ, or refused with the reason and the nearest value segtrain takes. */
static void test_simpletuner_values(void)
{
    VALUE_OK("optimizer", "\"torch-adamw\"", "adamw"), VALUE_OK("optimizer", "\"optimi-lion\"", "lion");
    VALUE_OK("lr_scheduler", "\"constant_with_warmup\"", "constant");
    VALUE_OK("lr_scheduler", "\"polynomial\"", "polynomial");
    VALUE_OK("lr_scheduler", "\"cosine_with_restarts\"", "cosine_with_restarts");
    VALUE_OK("attention_mechanism", "\"diffusers\"", "flash"), VALUE_OK("attention_mechanism", "\"xformers\"", "flash");
    VALUE_OK("attention_mechanism", "\"flash-attn-3-hub\"", "flash");
    VALUE_OK("attention_mechanism", "\"native-math\"", "math");
    VALUE_OK("grad_clip_method", "\"norm\"", "norm"), VALUE_OK("resolution_type", "\"area\"", "area");
    config *c = PARSE_OK("{\"optimizer\": \"adamw_bf16\", \"lr_scheduler\": \"constant_with_warmup\"}");
    if (c) {
        const char *w = config_warning(c);
        CHECK(strcmp(config_string(c, "optimizer"), "adamw") == 0);
        CHECKF(w && strstr(w, "config.json: optimizer \"adamw_bf16\" runs as adamw with float32"), "warning: %s",
               w ? w : "(none)");
        CHECKF(w && !strstr(w, "constant_with_warmup"), "an exact alias needs no note: %s", w ? w : "(none)");
        CHECK(strcmp(config_string(c, "grad_clip_method"), "value") == 0); /* SimpleTuner's default */
        config_free(c);
    }
    EXPECT_FAIL(parse_bad("{\"attention_mechanism\": \"metal-flash-attention-int8\"}"), ST_ERR_INVALID,
                "attention_mechanism: \"metal-flash-attention-int8\" is refused: quantized attention",
                "nearest it takes is flash");
    /* SageAttention: SimpleTuner's default sageattention_usage (inference) trains with exact attention */
    c = PARSE_OK("{\"attention_mechanism\": \"sageattention\"}");
    if (c) {
        CHECK(strcmp(config_string(c, "attention_mechanism"), "flash") == 0);
        CHECKF(config_warning(c) && strstr(config_warning(c), "\"sageattention\" is read as flash"), "warning: %s",
               config_warning(c) ? config_warning(c) : "(none)");
        config_free(c);
    }
    EXPECT_FAIL(parse_bad("{\"sageattention_usage\": \"training\"}"), ST_ERR_INVALID,
                "sageattention_usage: \"training\" is refused", "the nearest is inference");
    EXPECT_FAIL(parse_bad("{\"lr_scheduler\": \"sine\"}"), ST_ERR_INVALID, "\"sine\" is refused",
                "nearest is cosine_with_restarts");
    c = PARSE_OK("{}");
    if (c) {
        CHECK(config_set(c, "optimizer=optimi-lion") == ST_OK && strcmp(config_string(c, "optimizer"), "lion") == 0);
        EXPECT_FAIL(config_set(c, "attention_mechanism=metal-flash-attention-int4"), ST_ERR_INVALID,
                    "--set: attention_mechanism");
        config_free(c);
    }
    /* SimpleTuner's other checkpointing keys are taken, never refused */
    VALUE_OK("gradient_checkpointing_offload_prefetch", "true", "true");
    VALUE_OK("gradient_checkpointing_offload_pin_memory_max_buckets", "4", "4");
    /* optimizer_beta1 is SimpleTuner's other name for the first beta */
    c = PARSE_OK("{\"optimizer_beta1\": 0.8, \"--optimizer_beta2\": \"0.95\"}");
    if (c) {
        CHECK(config_float(c, "adam_beta1") == 0.8 && config_float(c, "adam_beta2") == 0.95);
        config_free(c);
    }
}

/* Every error of a file in one message, one line each, and --set applied before anything is judged. */
static void test_all_errors_and_overrides(void)
{
    const char *json = "{\"train_batch_size\": 0, \"optimizer\": \"sgd\", \"gradient_checkpointing_intervall\": 2, "
                       "\"seed\": -1, \"report_to\": \"none\"}";
    EXPECT_FAIL(parse_bad(json), ST_ERR_INVALID, "4 errors in the config:\n  config.json: train_batch_size: 0",
                "\n  config.json: optimizer: \"sgd\"", "\n  config.json: unknown key \"gradient_checkpointing_intervall\"",
                "\n  config.json: seed: -1");
    char *path = write_temp(json, strlen(json));
    if (!path) return;
    config *c = (config *)1;
    /* the overrides replace the file's bad values before validation: only the remaining errors are reported */
    const char *sets[] = {"train_batch_size=2", "--optimizer=lion", "seed=3"};
    EXPECT_FAIL(config_load_with(path, sets, 3, &c, NULL), ST_ERR_INVALID, "unknown key \"gradient_checkpointing_intervall\"");
    CHECKF(c == NULL && !strstr(st_error(), "errors in the config") && !strstr(st_error(), "train_batch_size"),
           "one error left: %s", st_error());
    unlink(path);
    json = "{\"--model_family\": \"flux\", \"checkpointing_steps\": \"x\", \"seed\": 1}";
    path = write_temp(json, strlen(json));
    if (!path) return;
    const char *fix[] = {"model_family=mmdit", "checkpoint_step_interval=7"}; /* any spelling replaces any */
    CHECK(config_load_with(path, fix, 2, &c, NULL) == ST_OK && c);
    if (c) {
        CHECK(strcmp(config_string(c, "model_family"), "mmdit") == 0 && config_int(c, "checkpoint_step_interval") == 7);
        CHECK(config_int(c, "seed") == 1);
        config_free(c);
    }
    const char *bad[] = {"seed=x", "nonsense=1", "novalue"};
    EXPECT_FAIL(config_load_with(path, bad, 3, &c, NULL), ST_ERR_INVALID, "4 errors in the config",
                "--set: seed: \"x\"", "--set: unknown key \"nonsense\"", "--set: \"novalue\" is not key=value",
                "checkpoint_step_interval: \"x\"");
    EXPECT_FAIL(config_load_with(NULL, bad, 1, &c, NULL), ST_ERR_INVALID, "--set: seed: \"x\"");
    /* the partial config: what was valid is read, what was refused stays at its default */
    config *partial = NULL;
    EXPECT_FAIL(config_load_with(path, bad, 3, &c, &partial), ST_ERR_INVALID, "4 errors");
    CHECK(c == NULL && partial && strcmp(config_string(partial, "model_family"), "flux") == 0 &&
          config_int(partial, "seed") == 0 && config_int(partial, "checkpoint_step_interval") == 500);
    config_free(partial);
    EXPECT_FAIL(config_parse("{", "x", &c), ST_ERR_FORMAT, "x:1:2");
    unlink(path);
}

static void test_lists(void)
{
    const char *ok[][2] = {{"[1, 3]", "1,3"}, {"\"1,3\"", "1,3"}, {"\"[2, 4]\"", "2,4"},
                           {"\" 5 , 6 \"", "5,6"}, {"5", "5"}, {"[]", ""}, {"\"\"", ""}, {"\"[]\"", ""},
                           {"[\"2\", 3]", "2,3"}};
    for (size_t t = 0; t < sizeof ok / sizeof ok[0]; t++) {
        char json[128], got[64] = "";
        snprintf(json, sizeof json, "{\"capture_hidden_states\": %s}", ok[t][0]);
        config *c = PARSE_OK(json);
        if (!c) continue;
        size_t n;
        const int64_t *l = config_int_list(c, "capture_hidden_states", &n);
        for (size_t i = 0; i < n; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)l[i]);
        CHECKF(strcmp(got, ok[t][1]) == 0, "capture_hidden_states %s read as [%s], want [%s]", ok[t][0], got,
               ok[t][1]);
        config_free(c);
    }
    const char *valid = "a list of integers >= 0 (e.g. [3, 7] or \"3,7\")";
    const char *bad[] = {"[-1]", "[\"x\"]", "\"1,,2\"", "\"1,\"", "[1.5]", "{\"a\":1}", "true", "\"x\"", "\"[1\""};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) VALUE_BAD("capture_hidden_states", bad[t], valid);
}

static void test_alias(void)
{
    config *c = PARSE_OK("{\"--checkpointing_steps\": \"250\"}");
    if (c) {
        CHECK(config_int(c, "checkpoint_step_interval") == 250 && config_is_set(c, "checkpoint_step_interval"));
        config_free(c);
    }
    c = PARSE_OK("{\"checkpointing_steps\": 250, \"checkpoint_step_interval\": \"250\"}");
    if (c) {
        CHECK(config_int(c, "checkpoint_step_interval") == 250);
        config_free(c);
    }
    EXPECT_FAIL(parse_bad("{\"checkpointing_steps\": 250, \"--checkpoint_step_interval\": 300}"), ST_ERR_INVALID,
                "config.json: ", "\"checkpointing_steps\": 250", "\"--checkpoint_step_interval\": 300", "disagree",
                "SimpleTuner's name for checkpoint_step_interval");
    EXPECT_FAIL(parse_bad("{\"checkpointing_steps\": 250, \"--checkpointing_steps\": 250}"), ST_ERR_INVALID,
                "checkpointing_steps is given twice");
    /* the alias is validated like its key */
    EXPECT_FAIL(parse_bad("{\"checkpointing_steps\": -1}"), ST_ERR_INVALID,
                "config.json: checkpoint_step_interval: -1 is not an integer >= 0");
}

static void test_unknown_keys(void)
{
    /* one edit from a known key (inserted, dropped, changed or swapped letters, alias included): a typo, refused,
     * every one in the report */
    EXPECT_FAIL(parse_bad("{\"learning_rte\": 3e-4}"), ST_ERR_INVALID,
                "config.json: unknown key \"learning_rte\" (did you mean learning_rate?)", "typo", "--lenient");
    EXPECT_FAIL(parse_bad("{\"--lerning_rate\": 1e-4, \"sed\": 3, \"report_to\": \"none\"}"), ST_ERR_INVALID,
                "2 errors in the config:", "\"--lerning_rate\" (did you mean learning_rate?)",
                "\"sed\" (did you mean seed?)");
    EXPECT_FAIL(parse_bad("{\"lerning_rate\": 1e-4}"), ST_ERR_INVALID, "did you mean learning_rate?");
    EXPECT_FAIL(parse_bad("{\"learning_rata\": 1e-4}"), ST_ERR_INVALID, "did you mean learning_rate?");
    EXPECT_FAIL(parse_bad("{\"leanring_rate\": 1e-4}"), ST_ERR_INVALID, "did you mean learning_rate?");
    EXPECT_FAIL(parse_bad("{\"learning_rates\": 1e-4}"), ST_ERR_INVALID, "did you mean learning_rate?");
    EXPECT_FAIL(parse_bad("{\"optimiser_beta1\": 0.8}"), ST_ERR_INVALID, "did you mean optimizer_beta1?");
    EXPECT_FAIL(parse_bad("{\"trian_batch_size\": 2}"), ST_ERR_INVALID, "did you mean train_batch_size?");
    /* two edits away, or a SimpleTuner key segtrain does not read: the warning, as before */
    config *c = PARSE_OK("{\"lerning_rte\": 1e-4, \"lora_dropout\": 0.1, \"validation_prompt\": \"a cat\"}");
    if (c) {
        const char *w = config_warning(c);
        CHECKF(w && strstr(w, "lerning_rte (did you mean learning_rate?)") && strstr(w, "lora_dropout"), "warning: %s",
               w ? w : "(none)");
        config_free(c);
    }
    config_set_lenient(true);
    c = PARSE_OK("{\"lerning_rate\": 1e-4, \"--text_encoder_1_precision\": \"int8-quanto\", "
                         "\"report_to\": \"none\", \"sed\": 3, \"new\\nline\": 1}");
    if (c) {
        const char *w = config_warning(c);
        CHECKF(w && strncmp(w, "config.json: ", 13) == 0, "warning: %s", w ? w : "(none)");
        CHECKF(w && strstr(w, "lerning_rate (did you mean learning_rate?)"), "warning: %s", w ? w : "(none)");
        CHECKF(w && strstr(w, "sed (did you mean seed?)"), "warning: %s", w ? w : "(none)");
        CHECKF(w && strstr(w, "--text_encoder_1_precision") && !strstr(w, "--text_encoder_1_precision (did"),
               "warning: %s", w ? w : "(none)");
        CHECKF(w && strstr(w, "report_to") && !strstr(w, "report_to (did"), "warning: %s", w ? w : "(none)");
        CHECKF(w && strstr(w, "config.json: ignoring keys that would change the result: lerning_rate") &&
                   strstr(w, "--text_encoder_1_precision") && strstr(w, "new?line"),
               "unknown keys are taken to change the result: %s", w ? w : "(none)");
        CHECKF(w && strstr(w, "\nconfig.json: ignoring keys that only report or publish: report_to"), "warning: %s",
               w ? w : "(none)");
        CHECKF(w && !strchr(strrchr(w, ':'), '\n'), "one line per kind: %s", w ? w : "(none)");
        CHECK(config_float(c, "learning_rate") == 1e-4 && !config_is_set(c, "learning_rate"));
        config_free(c);
    }
    /* lenient or not, a checkpointing key is never ignored */
    EXPECT_FAIL(parse_bad("{\"gradient_checkpointing_intervall\": 2}"), ST_ERR_INVALID,
                "did you mean gradient_checkpointing_interval?");
    config_set_lenient(false);
    EXPECT_FAIL(parse_bad("{\"gradient_checkpointing_intervall\": 2}"), ST_ERR_INVALID,
                "config.json: unknown key \"gradient_checkpointing_intervall\"",
                "did you mean gradient_checkpointing_interval?");
    EXPECT_FAIL(parse_bad("{\"--gradient_checkpointing_stride\": 4}"), ST_ERR_INVALID,
                "\"--gradient_checkpointing_stride\"", "did you mean gradient_checkpointing_segment_stride?");
    EXPECT_FAIL(parse_bad("{\"gradient_checkpointing_offload\": true}"), ST_ERR_INVALID,
                "did you mean gradient_checkpointing_offload_attention?");
    EXPECT_FAIL(parse_bad("{\"report_to\": 1, \"gradient_checkpointingx\": 1}"), ST_ERR_INVALID,
                "\"gradient_checkpointingx\"", "did you mean gradient_checkpointing?");
}

static void test_set(void)
{
    config *c = PARSE_OK("{\"seed\": 1, \"optimizer\": \"lion\", \"gradient_checkpointing_interval\": 2}");
    if (!c) return;
    CHECK(config_set(c, "seed=5") == ST_OK && config_int(c, "seed") == 5);
    CHECK(config_set(c, "--optimizer=adamw") == ST_OK && strcmp(config_string(c, "optimizer"), "adamw") == 0);
    CHECK(config_set(c, "checkpointing_steps=42") == ST_OK && config_int(c, "checkpoint_step_interval") == 42);
    CHECK(config_set(c, "gradient_checkpointing=true") == ST_OK && config_bool(c, "gradient_checkpointing"));
    CHECK(!config_is_set(c, "learning_rate"));
    CHECK(config_set(c, "learning_rate=3e-4") == ST_OK && config_float(c, "learning_rate") == 3e-4);
    CHECK(config_is_set(c, "learning_rate"));
    CHECK(config_set(c, "output_dir=/tmp/a=b") == ST_OK && strcmp(config_string(c, "output_dir"), "/tmp/a=b") == 0);
    size_t n;
    const int64_t *l;
    CHECK(config_set(c, "capture_hidden_states=1,3") == ST_OK);
    l = config_int_list(c, "capture_hidden_states", &n);
    CHECK(n == 2 && l[0] == 1 && l[1] == 3);
    CHECK(config_set(c, "capture_hidden_states=[2, 4, 6]") == ST_OK);
    l = config_int_list(c, "capture_hidden_states", &n);
    CHECK(n == 3 && l[2] == 6);
    CHECK(config_set(c, "capture_hidden_states=") == ST_OK);
    CHECK(config_int_list(c, "capture_hidden_states", &n) == NULL && n == 0);
    size_t bytes;
    CHECK(config_set(c, "device_memory=24GiB") == ST_OK && config_bytes(c, "device_memory", &bytes) == ST_OK &&
          bytes == 24ull << 30);

    EXPECT_FAIL(config_set(c, "optimizer=adam"), ST_ERR_INVALID,
                "--set: optimizer: \"adam\" is not one of adamw, lion");
    CHECK(strcmp(config_string(c, "optimizer"), "adamw") == 0); /* a refused override changes nothing */
    EXPECT_FAIL(config_set(c, "gradient_checkpointing_interval=0"), ST_ERR_INVALID,
                "--set: gradient_checkpointing_interval: \"0\" is not an integer >= 1");
    CHECK(config_int(c, "gradient_checkpointing_interval") == 2);
    EXPECT_FAIL(config_set(c, "gradient_checkpointing_backend=fast"), ST_ERR_INVALID,
                "--set: gradient_checkpointing_backend: \"fast\" is not one of torch, torch-ffn, unsloth, unsloth-ffn");
    EXPECT_FAIL(config_set(c, "gradient_checkpointing=maybe"), ST_ERR_INVALID,
                "--set: gradient_checkpointing: \"maybe\"", BOOL_VALID);
    EXPECT_FAIL(config_set(c, "seed="), ST_ERR_INVALID, "--set: seed: \"\" is not an integer >= 0");
    EXPECT_FAIL(config_set(c, "lerning_rate=1"), ST_ERR_INVALID,
                "--set: unknown key \"lerning_rate\" (did you mean learning_rate?)");
    EXPECT_FAIL(config_set(c, "--text_encoder_1_precision=no_change"), ST_ERR_INVALID,
                "--set: unknown key \"text_encoder_1_precision\"");
    EXPECT_FAIL(config_set(c, "base_model_precision=nf4-bnb"), ST_ERR_INVALID, "nf4-bnb",
                "bitsandbytes' NF4 is not built; the nearest built is int4-quanto");
    EXPECT_FAIL(config_set(c, "gradient_checkpointing_intervall=2"), ST_ERR_INVALID,
                "did you mean gradient_checkpointing_interval?");
    EXPECT_FAIL(config_set(c, "seed"), ST_ERR_INVALID, "--set: \"seed\" is not key=value");
    EXPECT_FAIL(config_set(c, "=5"), ST_ERR_INVALID, "is not key=value");
    config_free(c);
}

/* A long list of choices (a higher layer's, as model_preset's presets): the nearest names first, then all of them;
 * "--set key=" clears a choice key and model_preset */
static void test_choices_nearest_and_clear(void)
{
    const char *sizes = "dit-tiny|dit-s2|dit-b2|dit-xl2|mmdit-tiny|mmdit-s|skipdit-tiny|skipdit-s|flux-tiny";
    EXPECT_FAIL(config_choice_error("model_preset", "dit-s3", sizes), ST_ERR_INVALID,
                "model_preset: \"dit-s3\" is not one of its 9 choices; nearest: dit-s2, dit-b2, dit-xl2 (all: dit-tiny, "
                "dit-s2, dit-b2, dit-xl2, mmdit-tiny, mmdit-s, skipdit-tiny, skipdit-s, flux-tiny)");
    EXPECT_FAIL(config_choice_error("model_preset", "flux-tin", sizes), ST_ERR_INVALID, "nearest: flux-tiny, ");
    EXPECT_FAIL(config_choice_error("k", "c", "a|b"), ST_ERR_INVALID, "k: \"c\" is not one of a, b");
    EXPECT_FAIL(parse_bad("{\"model_preset\": 5}"), ST_ERR_INVALID, "config.json: model_preset: 5 is not a string");
    /* a short list stays as it was */
    VALUE_BAD("optimizer", "\"sgd\"", "one of adamw, lion");

    const char *json = "{\"model_preset\": \"dit-s2\", \"optimizer\": \"lion\", \"model_family\": \"dit\"}";
    char *path = write_temp(json, strlen(json));
    if (!path) return;
    config *c = NULL;
    const char *clear[] = {"model_preset=", "--optimizer="};
    CHECKF(config_load_with(path, clear, 2, &c, NULL) == ST_OK && c, "%s", st_error());
    if (c) {
        CHECK(!config_is_set(c, "model_preset") && !strcmp(config_string(c, "model_preset"), "dit-tiny"));
        CHECK(!config_is_set(c, "optimizer") && !strcmp(config_string(c, "optimizer"), "adamw"));
        CHECK(config_is_set(c, "model_family"));
        CHECK(config_set(c, "model_preset=dit-b2") == ST_OK && config_is_set(c, "model_preset"));
        CHECK(config_set(c, "model_preset=") == ST_OK && !config_is_set(c, "model_preset") &&
              !strcmp(config_string(c, "model_preset"), "dit-tiny"));
        config_free(c);
    }
    unlink(path);
    /* "" clears only a choice key: elsewhere it is a value, judged as any */
    c = PARSE_OK("{}");
    if (c) {
        EXPECT_FAIL(config_set(c, "train_batch_size="), ST_ERR_INVALID, "train_batch_size: \"\" is not an integer");
        CHECK(config_set(c, "output_dir=") == ST_OK && !strcmp(config_string(c, "output_dir"), ""));
        config_free(c);
    }
}

static void test_bytes(void)
{
    const struct { const char *json; size_t want; } ok[] = {
        {"\"24GiB\"", 24ull << 30}, {"\"512MiB\"", 512ull << 20}, {"\"80GB\"", 80000000000ull},
        {"\"1073741824\"", 1ull << 30}, {"\"1.5GiB\"", 3ull << 29}, {"\"4 KiB\"", 4096},
        {"\"10kb\"", 10000},        {"\"7B\"", 7},                {"4096", 4096},
        {"\"2TiB\"", 2ull << 40},   {"\"\"", 0}};
    for (size_t t = 0; t < sizeof ok / sizeof ok[0]; t++) {
        char json[128];
        snprintf(json, sizeof json, "{\"host_memory\": %s}", ok[t].json);
        config *c = PARSE_OK(json);
        if (!c) continue;
        size_t got = 1;
        st_status s = config_bytes(c, "host_memory", &got);
        CHECKF(s == ST_OK && got == ok[t].want, "host_memory %s: %zu bytes, want %zu", ok[t].json, got, ok[t].want);
        config_free(c);
    }
    const char *valid =
        "a size (a byte count, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB; \"\" = unlimited)";
    const char *bad[] = {"\"24 gigs\"", "\"0\"", "\"-1\"", "\"GiB\"", "\"1e3\"", "\"24  GiB\"", "\"24GiB \"",
                         "\"24 \"",     "0",     "-5",     "1.5",     "true",    "\"0x10\"",    "\"99999999999TiB\""};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) VALUE_BAD("device_memory", bad[t], valid);
    config *c = PARSE_OK("{\"device_memory\": \"80GB\"}");
    if (c) {
        CHECK(strcmp(config_string(c, "device_memory"), "80GB") == 0);
        config_free(c);
    }
}

/* A config.json as SimpleTuner users write them: "--" keys, numbers and bools as strings, trailing commas,
 * and plenty of keys segtrain has no use for. */
static const char simpletuner_json[] =
    "{\n"
    "    \"--resume_from_checkpoint\": \"latest\",\n"
    "    \"--data_backend_config\": \"config/multidatabackend.json\",\n"
    "    \"--aspect_bucket_rounding\": 2,\n"
    "    \"--seed\": 42,\n"
    "    \"--output_dir\": \"output/models\",\n"
    "    \"--lora_type\": \"standard\",\n"
    "    \"--lora_rank\": \"64\",\n"
    "    \"--max_train_steps\": \"10000\",\n"
    "    \"--num_train_epochs\": 0,\n"
    "    \"--checkpointing_steps\": \"500\",\n"
    "    \"--checkpoints_total_limit\": 5,\n"
    "    \"--model_type\": \"lora\",\n"
    "    \"--model_family\": \"dit\",\n"
    "    \"--learning_rate\": \"1e-4\",\n"
    "    \"--lr_scheduler\": \"cosine\",\n"
    "    \"--lr_warmup_steps\": 100,\n"
    "    \"--optimizer\": \"adamw\",\n"
    "    \"--train_batch_size\": 1,\n"
    "    \"--gradient_checkpointing\": \"true\",\n"
    "    \"--gradient_checkpointing_interval\": \"2\",\n"
    "    \"--gradient_checkpointing_backend\": \"torch-ffn\",\n"
    "    \"--mixed_precision\": \"bf16\",\n"
    "    \"--report_to\": \"none\",\n"
    "    \"--validation_prompt\": \"a photo of a cat, highly detailed\",\n"
    "    \"--validation_steps\": \"250\",\n"
    "    \"--max_grad_norm\": 1.0,\n"
    "    \"--base_model_precision\": \"int8-quanto\",\n"
    "    \"--text_encoder_1_precision\": \"int8-quanto\",\n"
    "    \"--disable_benchmark\": false,\n"
    "    \"--push_to_hub\": \"false\",\n"
    "}\n";

static void check_simpletuner(const config *c)
{
    CHECK(strcmp(config_string(c, "resume_from_checkpoint"), "latest") == 0);
    CHECK(config_int(c, "seed") == 42 && config_int(c, "lora_rank") == 64);
    CHECK(config_int(c, "max_train_steps") == 10000 && config_int(c, "checkpoint_step_interval") == 500);
    CHECK(config_float(c, "num_train_epochs") == 0 && config_is_set(c, "num_train_epochs")); /* read: steps count */
    CHECK(config_int(c, "checkpoints_total_limit") == 5 && config_int(c, "lr_warmup_steps") == 100);
    CHECK(strcmp(config_string(c, "model_type"), "lora") == 0);
    CHECK(strcmp(config_string(c, "mixed_precision"), "bf16") == 0); /* read, as SimpleTuner means it */
    CHECK(strcmp(config_string(c, "lr_scheduler"), "cosine") == 0);
    CHECK(config_float(c, "learning_rate") == 1e-4 && config_float(c, "max_grad_norm") == 1.0);
    CHECK(config_bool(c, "gradient_checkpointing") && config_int(c, "gradient_checkpointing_interval") == 2);
    CHECK(strcmp(config_string(c, "gradient_checkpointing_backend"), "torch-ffn") == 0);
    CHECK(config_int(c, "validation_steps") == 250 && strcmp(config_string(c, "output_dir"), "output/models") == 0);
    CHECK(strcmp(config_string(c, "data_backend_config"), "config/multidatabackend.json") == 0);
    CHECK(config_int(c, "aspect_bucket_rounding") == 2); /* read: the aspect buckets' names */
    const char *w = config_warning(c);
    CHECK(strcmp(config_string(c, "base_model_precision"), "int8-quanto") == 0); /* read: the base quantized */
    const char *unused[] = {"--report_to", "--validation_prompt", "--text_encoder_1_precision", "--disable_benchmark",
                            "--push_to_hub"};
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++)
        CHECKF(w && strstr(w, unused[i]), "warning lacks %s: %s", unused[i], w ? w : "(none)");
    CHECKF(w && !strstr(w, "lora_type"), "lora_type standard is segtrain's LoRA, no warning: %s", w ? w : "(none)");
    CHECKF(w && !strstr(w, "did you mean"), "no SimpleTuner key here is a typo: %s", w ? w : "(none)");
}

/* A SimpleTuner key at the value with which it does what segtrain does anyway is not in the warning; at any other
 * value it is, bools given as strings alike */
static void test_neutral_values(void)
{
    config *c = NULL;
    CHECK(config_parse("{\"controlnet\": false, \"loss_type\": \"l2\", \"lora_type\": \"standard\", "
                       "\"minimum_image_size\": 0, \"flow_schedule_auto_shift\": \"false\"}", "n.json", &c) == ST_OK);
    CHECKF(c && !config_warning(c), "neutral values warn: %s", c && config_warning(c) ? config_warning(c) : "");
    config_free(c);
    CHECK(config_parse("{\"controlnet\": \"true\", \"loss_type\": \"huber\", "
                       "\"minimum_image_size\": 512, \"flow_schedule_auto_shift\": true}", "n.json", &c) == ST_OK);
    const char *w = c ? config_warning(c) : NULL;
    const char *named[] = {"controlnet", "loss_type", "minimum_image_size", "flow_schedule_auto_shift"};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        CHECKF(w && strstr(w, named[i]), "the warning lacks %s: %s", named[i], w ? w : "(none)");
    config_free(c);
    /* lora_type lycoris reads lycoris_config (the model layer reads the file): neither is a key ignored */
    c = PARSE_OK("{\"model_type\": \"lora\", \"lora_type\": \"lycoris\", \"lycoris_config\": \"l.json\"}");
    CHECKF(c && !strcmp(config_string(c, "lycoris_config"), "l.json") &&
               (!config_warning(c) || !strstr(config_warning(c), "lycoris")),
           "lycoris_config read, not warned about: %s", c && config_warning(c) ? config_warning(c) : "(none)");
    config_free(c);
    EXPECT_FAIL(parse_bad("{\"lora_type\": \"loha\"}"), ST_ERR_INVALID, "lora_type: \"loha\" is not one of standard, lycoris");
    c = PARSE_OK("{\"lora_type\": \"standard\"}");
    CHECKF(c && !config_warning(c) && !strcmp(config_string(c, "lora_type"), "standard"), "lora_type standard");
    config_free(c);
}

static char *write_temp(const char *text, size_t len)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/segtrain_test_config_XXXXXX");
    int fd = mkstemp(path);
    CHECKF(fd >= 0, "mkstemp failed");
    if (fd < 0) return NULL;
    CHECK(write(fd, text, len) == (ssize_t)len);
    close(fd);
    return path;
}

static void test_load(void)
{
    char *path = write_temp(simpletuner_json, strlen(simpletuner_json));
    if (!path) return;
    config *c = NULL;
    st_status s = config_load(path, &c);
    CHECKF(s == ST_OK, "config_load: %s", st_error());
    if (c) {
        check_simpletuner(c);
        const char *w = config_warning(c);
        CHECKF(w && strncmp(w, path, strlen(path)) == 0, "the warning names the file: %s", w ? w : "(none)");
        /* command-line overrides on top of the file */
        CHECK(config_set(c, "--gradient_checkpointing_interval=4") == ST_OK);
        CHECK(config_int(c, "gradient_checkpointing_interval") == 4);
        config_free(c);
    }
    unlink(path);
    c = (config *)1;
    EXPECT_FAIL(config_load("/nonexistent/dir/config.json", &c), ST_ERR_IO, "/nonexistent/dir/config.json");
    CHECK(c == NULL);
    CHECKF(!strchr(st_error(), '\n'), "one line: %s", st_error());
    EXPECT_FAIL(config_load("/", &c), ST_ERR_IO, "/: is a folder, not a regular file");

    path = write_temp("{\"seed\": 1}\0junk", 16);
    if (path) EXPECT_FAIL(config_load(path, &c), ST_ERR_FORMAT, path, "NUL byte"), unlink(path);
    const char *broken = "{\n  \"seed\": 1,\n  \"x\": tru\n}";
    path = write_temp(broken, strlen(broken));
    if (path) {
        char want[96];
        snprintf(want, sizeof want, "%s:3:8: malformed JSON", path);
        EXPECT_FAIL(config_load(path, &c), ST_ERR_FORMAT, want);
        unlink(path);
    }
    c = PARSE_OK(simpletuner_json); /* the same text through config_parse */
    if (c) check_simpletuner(c), config_free(c);
}

/* A getter asked for a key that does not exist, or for the wrong type, stops the program. */
static void expect_abort(int which)
{
    config *c = PARSE_OK("{}");
    if (!c) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        size_t n;
        if (which == 0) config_int(c, "no_such_key");
        if (which == 1) config_bool(c, "seed");
        if (which == 2) config_int_list(c, "seed", &n);
        if (which == 3) config_int(c, "checkpointing_steps"); /* getters take canonical names */
        if (which == 4) config_bytes(c, "output_dir", &n);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "misuse %d did not abort (status %d)", which, status);
    config_free(c);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len + 4096 > cap && !(buf = realloc(buf, cap = 2 * cap + 4096))) break;
        size_t got = fread(buf + *len, 1, cap - *len, f);
        *len += got;
        if (got == 0) break;
    }
    fclose(f);
    return buf;
}

static void test_doc(const char *doc_path)
{
    char *want = NULL;
    size_t want_len = 0;
    FILE *mem = open_memstream(&want, &want_len);
    config_write_doc(mem);
    fclose(mem);
    for (int i = 0; i < cfg_key_count; i++) {
        char row[128];
        snprintf(row, sizeof row, "\n| `%s`", cfg_keys[i].name);
        CHECKF(strstr(want, row), "the reference lacks a row for %s", cfg_keys[i].name);
        const char *start = strstr(want, row), *end = start ? strchr(start + 1, '\n') : NULL;
        for (const char *c = cfg_keys[i].choices; c && end && *c;) { /* the whole list, however long it grows */
            const size_t w = strcspn(c, "|");
            char choice[128];
            snprintf(choice, sizeof choice, "`%.*s`", (int)w, c);
            const char *at = strstr(start, choice);
            CHECKF(at && at < end, "the reference's %s row lacks %s", cfg_keys[i].name, choice);
            c += w + (c[w] == '|');
        }
    }
    for (int s = 0; s < SEC_COUNT; s++) {
        char heading[64];
        snprintf(heading, sizeof heading, "\n## %s\n", cfg_section_names[s]);
        CHECKF(strstr(want, heading), "the reference lacks section %s", cfg_section_names[s]);
    }
    size_t have_len = 0;
    char *have = read_all(doc_path, &have_len);
    CHECKF(have && have_len == want_len && memcmp(have, want, want_len) == 0,
           "%s is %s: regenerate with `%s` (or, built standalone, `<test binary> --write docs/CONFIG.md`)", doc_path,
           have ? "stale" : "missing", REGENERATE);
    free(have);
    free(want);
}

/* argv[1]: the source folder (docs/CONFIG.md below it) or the file itself. */
static char *doc_path_from(const char *arg)
{
    static char path[4096];
    struct stat st;
    if (stat(arg, &st) == 0 && !S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s", arg);
    else snprintf(path, sizeof path, "%s/docs/CONFIG.md", arg);
    return path;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        FILE *f = fopen(argv[2], "w");
        if (!f) return perror(argv[2]), 1;
        config_write_doc(f);
        if (fclose(f) != 0) return perror(argv[2]), 1;
        printf("wrote %s\n", argv[2]);
        return 0;
    }
#ifdef SEGTRAIN_SOURCE_DIR
    const char *source = SEGTRAIN_SOURCE_DIR;
#else
    const char *source = ".";
#endif
    if (argc > 1) source = argv[1];

    test_defaults();
    test_registry();
    test_dashes_and_duplicates();
    test_neutral_values();
    test_trailing_commas();
    test_malformed();
    test_typed_values();
    test_checkpointing_and_choices();
    test_simpletuner_values();
    test_all_errors_and_overrides();
    test_lists();
    test_alias();
    test_unknown_keys();
    test_set();
    test_choices_nearest_and_clear();
    test_bytes();
    test_load();
    for (int which = 0; which < 5; which++) expect_abort(which);
    test_doc(doc_path_from(source));
    return tk_finish();
}
