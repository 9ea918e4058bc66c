/* enable_group_offload (docs/WEIGHTS.md): SimpleTuner hands the transformer to diffusers' apply_group_offloading.
 * block_level cuts every block list (a ModuleList child) into groups of group_offload_blocks_per_group consecutive
 * blocks, each onloaded before its first block runs and offloaded after its last; leaf_level makes every leaf layer
 * a group; the weights of no group form one more, onloaded when the model's forward starts. Here each group is a
 * group of the block swap's machinery (params.h): its frozen weights in one host allocation (or a file), brought into
 * one device buffer while the executor runs its blocks (forward, recompute, backward) or lin.c a leaf's GEMM, and the
 * rest for each step. Adapters stay on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/core/family.h"
#include "models/core/internal.h"

/* Block i's group, 0: none of its own (a block outside a ModuleList, U-ViT's mid_block: in the step's group). */
static int group_of(const struct swap_seq *q, int i) { return q->group[i]; }

/* A group comes in with its first block the executor runs, and stays while the executor runs its blocks; under
 * use_stream, a group coming in for a forward starts the next one's copy (diffusers' prefetch). */
static st_status group_in(void *ctx, int i, int next)
{
    const struct swap_seq *q = ctx;
    param_set *s = q->m->params;
    const int g = group_of(q, i);
    st_status st = !g || param_swap_is_in(s, g) ? ST_OK : param_swap_in(s, g, q->m->off.engine);
    if (!st && g && q->prefetch && next > i && g < q->last) st = param_swap_prefetch(s, g + 1, q->m->off.engine);
    return st;
}

static void group_out(void *ctx, int i, int next)
{
    const struct swap_seq *q = ctx;
    const int g = group_of(q, i);
    if (g && (next < 0 || group_of(q, next) != g)) param_swap_out(q->m->params, g);
}

static void label(param_set *s, int g, const char *text)
{
    snprintf(s->swap[g - 1].label, sizeof s->swap[g - 1].label, "%s", text);
}

/* Block i's list (its module name less ".<index>") and index there; -1: a module of its own. */
static int list_index(const model *m, int q, int i, char *list, size_t n)
{
    model_block_module(m, q, i, list, n);
    char *dot = strrchr(list, '.');
    if (!dot || !dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1)) return -1;
    *dot = 0;
    return atoi(dot + 1);
}

/* Sequence q's blocks in groups of k consecutive blocks of one list (diffusers' ModuleList children), numbered on
 * from *g, each labelled as diffusers' group id ("transformer_blocks_0_1"). */
static st_status seq_groups(model *m, int q, int k, int *g)
{
    block_seq *b = &m->seq[q];
    int *group = model_alloc(m, (size_t)b->n, sizeof *group);
    if (!group) return st_host_oom("the offloaded groups of %s", b->name);
    m->swap[q] = (struct swap_seq){.m = m, .first = *g + 1, .group = group, .prefetch = m->cfg.group_offload_stream};
    char list[PARAM_NAME_MAX], prev[PARAM_NAME_MAX] = "", prefix[PARAM_NAME_MAX + 2], id[PARAM_GROUP_LABEL_MAX];
    st_status st = ST_OK;
    for (int i = 0, start = -1; i < b->n && !st; i++) {
        const int at = list_index(m, q, i, list, sizeof list);
        if (at < 0) continue;
        if (strcmp(list, prev) || at / k != start / k) ++*g, start = at, snprintf(prev, sizeof prev, "%s", list);
        group[i] = *g;
        model_block_module(m, q, i, prefix, sizeof prefix - 1);
        strcat(prefix, ".");
        st = param_set_swap(m->params, *g, prefix);
        snprintf(id, sizeof id, "%s_%d_%d", list, start, at); /* the last block's index, once the group ends */
        if (!st) label(m->params, *g, id);
    }
    m->swap[q].last = *g;
    b->weights_in = group_in, b->weights_out = group_out, b->weights_ctx = &m->swap[q];
    return st;
}

/* block_level: every block list in groups of group_offload_blocks_per_group blocks (the last shorter); a module the
 * family runs outside its block is left to the step's group. */
static st_status block_groups(model *m, int *g)
{
    st_status st = ST_OK;
    for (int q = 0; q < m->n_seq && !st; q++)
        if (m->seq[q].n) st = seq_groups(m, q, (int)m->cfg.group_offload_blocks, g);
    param_set *s = m->params;
    for (const char *const *o = family_of_config(&m->cfg)->outside_blocks; o && *o; o++)
        for (int i = 0; i < s->n; i++)
            if (!strncmp(s->items[i].name, *o, strlen(*o))) s->items[i].swap_group = 0;
    return st;
}

/* leaf_level: each frozen linear layer a group, brought in by lin.c around each GEMM that reads it. */
static st_status leaf_groups(model *m, int *g)
{
    param_set *s = m->params;
    st_status st = ST_OK;
    for (int i = 0; i < s->n && !st; i++) {
        const param *q = &s->items[i];
        if (!q->linear || q->trainable) continue;
        char module[PARAM_NAME_MAX];
        snprintf(module, sizeof module, "%.*s", (int)(strlen(q->name) - strlen("weight")), q->name);
        st = param_set_swap(s, ++*g, module); /* the weight and its bias */
        module[strlen(module) - 1] = 0;
        if (!st) label(s, *g, module);
    }
    s->stream_layers = true;
    if (*g) model_hook_layers(m);
    return st;
}

st_status model_group_offload(model *m)
{
    const model_config *mc = &m->cfg;
    if (!mc->group_offload) return ST_OK;
    const family_desc *d = family_of_config(mc);
    if (d->topology == TOPO_UNET) /* SimpleTuner's configure_group_offload */
        return st_fail(ST_ERR_UNSUPPORTED, "enable_group_offload: group offload is only supported for "
                       "transformer-based models (SimpleTuner refuses it for the %s family's U-Net)", mc->family);
    if (!mc->lora_rank)
        return st_fail(ST_ERR_UNSUPPORTED, "enable_group_offload: full fine-tuning trains the offloaded weights, and "
                       "moving their gradients and optimizer state with them is not built; train LoRA or LyCORIS (the "
                       "adapters stay on the device)");
    param_set *s = m->params;
    s->offload_tags = true;
    int g = 0, marked = 0;
    st_status st = mc->group_offload_leaf ? leaf_groups(m, &g) : block_groups(m, &g);
    if (!st) st = param_set_swap_rest(s, g + 1, &marked);
    if (!st && marked) {
        s->step_group = g + 1;
        char id[PARAM_GROUP_LABEL_MAX];
        snprintf(id, sizeof id, "%s_unmatched_group", d->st[0].diffusers ? d->st[0].diffusers : "transformer");
        label(s, g + 1, id);
    }
    return st;
}
