/* The skipdit family's blocks: DiT blocks (dit_block.c) with U-ViT-style long skips (models/core/skips.h); dit.c runs
 * them between DiT's embeddings and final layer. */
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/core/skips.h"

#include <stdio.h>

static const block_kind skipdit_block_kind = {
    SKIP_BLOCK_KIND("skipdit"), .ffn_split = true, .softmax_attention = true, .keeps_attention_output = true};

st_status skipdit_blocks(model *m, param_set *s, void **data)
{
    const model_config *c = &m->cfg;
    const int depth = (int)c->depth, in = depth / 2;
    /* the widest states (the last in-block's output, the mid block's input) hold the stream and `in` skips */
    if (in + 1 > STATE_MAX)
        return st_fail(ST_ERR_UNSUPPORTED, "depth: %d blocks; skipdit holds at most %d skips at once (valid: an odd "
                       "depth from 3 to %d)", depth, STATE_MAX - 1, 2 * STATE_MAX - 1);
    skip_block *sb = model_seq_blocks(m, 0, "blocks", depth, &skipdit_block_kind, sizeof *sb);
    dit_block *db = sb ? model_alloc(m, (size_t)depth, sizeof *db) : NULL;
    if (!db) return st_host_oom("%d skip blocks", depth);
    for (int i = 0; i < depth; i++) {
        const skip_role role = skip_role_of(i, depth);
        char prefix[32], name[PARAM_NAME_MAX];
        skip_module_name(i, depth, prefix, sizeof prefix);
        sb[i] = (skip_block){.kind = &dit_block_kind, .inner = &db[i], .m = m, .role = role,
                             .skips = skip_count(i, depth), .ranges = 1};
        dit_block_register(s, &db[i], prefix, c);
        if (role == SKIP_OUT) { /* LoRA adapts it as it does the MLP's linears */
            snprintf(name, sizeof name, "%s.skip_linear", prefix);
            sb[i].merge[0] = lin_register(s, name, 2 * c->hidden, c->hidden, true, c->lora_mlp ? c->lora_rank : 0,
                                          (float)c->lora_alpha, !c->lora_rank);
        }
        db[i].m = m;
    }
    *data = sb;
    return ST_OK;
}

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    {"skipdit-tiny", 5, 64, 4, 2, 4, 8, 10, 0, 0, 0, 0, false, false, 0, 0},
    {"skipdit-s", 13, 384, 6, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
};

static st_status skipdit_check(const model_config *mc)
{
    if (mc->depth < 3 || mc->depth % 2 == 0)
        return st_fail(ST_ERR_INVALID, "depth: %lld blocks; skipdit needs an odd number >= 3 (in-blocks, a mid block, "
                       "as many out-blocks)", (long long)mc->depth);
    return ST_OK;
}

const family_desc skipdit_desc = {
    .name = "skipdit", .topology = TOPO_OWN, .traits = TR_OWN, .block_module = skip_module_name,
    .ops = &skipdit_family, FAMILY_PRESETS(presets), .check = skipdit_check,
};
