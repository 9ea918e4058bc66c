/* What the U-Nets' micro-blocks (unet_block.c, cascade_block.c) share: how a block's states carry the skips from
 * the down path to the up path. The input state is the stream, then the live skips, oldest first; a block that
 * reads a skip takes the newest and passes the others on; a block whose output is also a skip lists it twice. */
#include "internal.h"

void micro_skip_states(const skip_io *io, int64_t batch, state_map *out)
{
    const int passed = io->skips - io->reads;
    *out = (state_map){.n_in = 1 + io->skips, .n_out = 1 + passed + io->emit};
    out->in_numel[0] = batch * io->in_numel;
    for (int k = 1; k <= io->skips; k++) out->in_numel[k] = batch * io->skip_numel[k];
    out->out_numel[0] = batch * io->out_numel;
    out->out_from[0] = -1; /* the forward's new tensor */
    for (int k = 1; k <= passed; k++) out->out_numel[k] = out->in_numel[k], out->out_from[k] = k;
    if (io->emit) out->out_numel[out->n_out - 1] = out->out_numel[0], out->out_from[out->n_out - 1] = -1;
}

void micro_skip_output(const skip_io *io, const block_state *in, float *y, block_state *out)
{
    const int passed = io->skips - io->reads;
    *out = (block_state){.n = 1 + passed, .t = {y}};
    for (int k = 1; k <= passed; k++) out->t[k] = in->t[k];
    if (io->emit) out->t[out->n++] = y;
}

void micro_skip_grad_join(const skip_io *io, int64_t batch, pool *p, block_state *grad)
{
    if (!io->emit) return;
    float *dskip = grad->t[grad->n - 1]; /* the gradient of the output's second slot: it adds to the stream's */
    add_to(grad->t[0], dskip, batch * io->out_numel);
    pool_free(p, dskip);
    grad->t[--grad->n] = NULL;
}
