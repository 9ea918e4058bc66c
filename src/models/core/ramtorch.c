/* ramtorch (docs/WEIGHTS.md): SimpleTuner's replace_linear_layers_with_ramtorch (helpers/utils/ramtorch.py) swaps
 * the transformer's nn.Linear modules that ramtorch_target_modules selects, the first ramtorch_transformer_percent
 * of them, for RamTorch's Linear, whose weight and bias stay in host memory and are copied onto the device for each
 * use. Here each selected layer is a group of the block swap's machinery (params.h): its frozen weight and bias
 * held in the host pool, brought by lin.c into one device buffer around each GEMM that reads them. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/family.h"
#include "models/core/internal.h"

/* Python's fnmatch on POSIX: case-sensitive, '*' crossing dots, backslash an ordinary character. */
static bool glob_matches(const char *pattern, size_t len, const char *name)
{
    char p[RAMTORCH_TARGETS_MAX];
    snprintf(p, sizeof p, "%.*s", (int)len, pattern);
    return !fnmatch(p, name, FNM_NOESCAPE);
}

/* _matches_pattern: one pattern against the module's name under its component ("transformer.blocks.0.attn.to_q"),
 * that name less its first part, and the module's class; a pattern without glob characters also as "pattern.*". */
static bool pattern_selects(const char *pattern, size_t len, const char *component, const char *module,
                            const char *cls)
{
    char qualified[PARAM_NAME_MAX + 32], bare[RAMTORCH_TARGETS_MAX + 2];
    snprintf(qualified, sizeof qualified, "%s.%s", component, module);
    if (glob_matches(pattern, len, qualified) || glob_matches(pattern, len, module) || glob_matches(pattern, len, cls))
        return true;
    if (memchr(pattern, '*', len) || memchr(pattern, '?', len) || memchr(pattern, '[', len)) return false;
    snprintf(bare, sizeof bare, "%.*s.*", (int)len, pattern);
    return glob_matches(bare, strlen(bare), qualified) || glob_matches(bare, strlen(bare), module);
}

/* Whether the comma-separated patterns (blank entries skipped; none: every layer) select the layer of weight q. */
static bool targets_select(const char *targets, const char *component, const param *q)
{
    char module[PARAM_NAME_MAX];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(q->name) - strlen(".weight")), q->name);
    /* SimpleTuner quantizes before it streams: quanto's QLinear stands where it quantized */
    const char *cls = q->quant ? "QLinear" : "Linear";
    bool any = false;
    for (const char *at = targets; *at;) {
        const size_t n = strcspn(at, ",");
        size_t from = 0, to = n;
        while (from < to && (at[from] == ' ' || at[from] == '\t')) from++;
        while (to > from && (at[to - 1] == ' ' || at[to - 1] == '\t')) to--;
        if (to > from) {
            any = true;
            if (pattern_selects(at + from, to - from, component, module, cls)) return true;
        }
        at += n + (at[n] == ',');
    }
    return !any;
}

/* The layers to stream: the selected ones' first ceil(n x percent / 100), at least one above 0 (SimpleTuner's
 * percentage mode), in registration order. */
static int streamed_count(const model_config *mc, int selected)
{
    if (mc->ramtorch_percent >= 100) return selected;
    int n = (int)ceil((double)selected * mc->ramtorch_percent / 100);
    return n == 0 && mc->ramtorch_percent > 0 ? 1 : n;
}

static st_status refuse_trained(const param *q)
{
    return st_fail(ST_ERR_UNSUPPORTED, "ramtorch: %s trains (full fine-tuning): RamTorch copies a streamed weight's "
                   "gradient to its host copy and the optimizer steps it there, and a host-side gradient and "
                   "optimizer state are not built (segtrain's optimizer steps on the device); train LoRA or LyCORIS "
                   "(the adapters stay on the device), or leave the layer out with ramtorch_target_modules", q->name);
}

static st_status refuse_unmatched(const model *m, const char *component)
{
    const param_set *s = m->params;
    const char *example = "";
    for (int i = 0; i < s->n && !*example; i++)
        if (s->items[i].linear) example = s->items[i].name;
    return st_fail(ST_ERR_INVALID, "ramtorch_target_modules \"%s\" selects none of the %s model's linear layers "
                   "(patterns match module names such as %.*s or %s.%.*s, or the class Linear)", m->cfg.ramtorch_targets,
                   m->cfg.family, (int)(strlen(example) - strlen(".weight")), example, component,
                   (int)(strlen(example) - strlen(".weight")), example);
}

static st_status layer_in(void *ctx, int group)
{
    model *m = ctx;
    return param_swap_in(m->params, group, m->off.engine);
}

static void layer_out(void *ctx, int group)
{
    model *m = ctx;
    param_swap_out(m->params, group);
}

st_status model_stream_layers(model *m)
{
    if (!m->cfg.ramtorch) return ST_OK;
    const char *component = family_of_config(&m->cfg)->lora_component;
    if (!component) component = "transformer";
    param_set *s = m->params;
    int selected = 0;
    for (int i = 0; i < s->n; i++)
        selected += s->items[i].linear && targets_select(m->cfg.ramtorch_targets, component, &s->items[i]);
    if (!selected) return refuse_unmatched(m, component);
    const int n = streamed_count(&m->cfg, selected);
    st_status st = ST_OK;
    for (int i = 0, g = 0; i < s->n && g < n && !st; i++) {
        const param *q = &s->items[i];
        if (!q->linear || !targets_select(m->cfg.ramtorch_targets, component, q)) continue;
        if (q->trainable) return refuse_trained(q);
        char prefix[PARAM_NAME_MAX];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(q->name) - strlen("weight")), q->name);
        st = param_set_swap(s, ++g, prefix); /* the weight and its bias: a linear layer has no module under it */
    }
    s->stream_layers = true;
    if (n) model_hook_layers(m);
    return st;
}

void model_hook_layers(model *m)
{
    param_set *s = m->params;
    s->layer_in = layer_in, s->layer_out = layer_out, s->layer_ctx = m;
}
