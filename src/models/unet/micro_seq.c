/* What the U-Nets (unet.c with unet_block.c, cascade.c with cascade_block.c) share (micro_seq.h). The input state is
 * the stream, then the live skips, oldest first; a block that reads a skip takes the newest and passes the others
 * on; a block whose output is also a skip lists it twice. The stream changes shape from block to block, so its
 * gradient lives in one buffer as wide as the widest stream, each block writing dL/dx in place of dL/dy. */
#include "models/unet/micro_seq.h"

#include <stdio.h>

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

int64_t micro_walk_next(micro_walk *w, skip_io *io, int64_t cout, int64_t h_out, int64_t w_out, bool reads,
                        bool emit)
{
    const int64_t cskip = reads && w->skips ? w->skip_c[w->skips - 1] : 0;
    *io = (skip_io){.skips = w->skips, .reads = cskip > 0, .emit = emit, .in_numel = w->c * w->h * w->w,
                    .out_numel = cout * h_out * w_out};
    for (int k = 0; k < w->skips; k++) io->skip_numel[k + 1] = w->skip_c[k] * w->skip_plane[k];
    w->n++;
    if (reads && w->skips) w->skips--;
    w->c = cout, w->h = h_out, w->w = w_out;
    if (emit) {
        if (w->skips == STATE_MAX - 1) w->overflow = true;
        else w->skip_c[w->skips] = cout, w->skip_plane[w->skips] = h_out * w_out, w->skips++;
    }
    return cskip;
}

st_status micro_forward_end(block *b, st_status r, block_saved *sv, bool empty, block_saved **saved_io,
                            const skip_io *io, const block_state *in, float *y, block_state *out)
{
    if (r || empty || !saved_io) b->kind->release(b, sv), sv = NULL;
    if (saved_io) *saved_io = sv;
    if (!r) micro_skip_output(io, in, y, out);
    return r;
}

const char *micro_name(char *buf, size_t n, const char *prefix, const char *name)
{
    if (snprintf(buf, n, "%s.%s", prefix, name) >= (int)n) buf[n - 1] = '\0';
    return buf;
}

void *micro_seq_blocks(model *m, int n, const block_kind *kind, size_t size, const char *state_name)
{
    void *blocks = model_seq_blocks(m, 0, "micro-blocks", n, kind, size);
    m->seq[0].state_names[0] = state_name;
    m->seq_sample[0] = m->cfg.channels * m->cfg.height * m->cfg.width; /* the latents' */
    return blocks;
}

st_status micro_seq_forward(model *m, const float *x, bool train,
                            st_status (*head_forward)(model *m, const float *h))
{
    const model_config *c = &m->cfg;
    const int64_t nx = m->shape.batch * c->channels * c->height * c->width;
    st_status st = ST_OK;
    float *first = model_take(m, &st, nx, "micro.latents", false);
    if (st) return st;
    copy_rows(first, nx, x, nx, 1, nx);
    st = model_seq_forward1(m, 0, &first, train, NULL);
    return st ? st : head_forward(m, m->step.last.t[0]);
}

/* The stream's gradient buffer, zeroed: as wide as the widest stream on any of the sequence's boundaries, since each
 * block writes dL/dx in place of dL/dy whatever their shapes. */
static st_status grad_buffer(model *m, float **dh)
{
    const block_seq *s = &m->seq[0];
    int64_t widest = 0;
    for (int i = 0; i < s->n; i++) {
        state_map map;
        block_state_map(s, i, &map);
        widest = widest > map.in_numel[0] ? widest : map.in_numel[0];
        widest = widest > map.out_numel[0] ? widest : map.out_numel[0];
    }
    *dh = NULL;
    return pool_alloc_zero(m->pool, (size_t)widest * sizeof(float), MEM_ACTIVATIONS, "micro.dstate", (void **)dh);
}

st_status micro_seq_backward(model *m, const float *dpred,
                             st_status (*head_backward)(model *m, const float *h, const float *dpred, float *dh),
                             float **dh)
{
    st_status st = grad_buffer(m, dh);
    if (!st) st = head_backward(m, m->step.last.t[0], dpred, *dh);
    state_free(m->pool, &m->step.last);
    return st ? st : model_seq_backward(m, 0, &(block_state){.n = 1, .t = {*dh}});
}

st_status host_side_send(host_side *hs, offload *off, scratch *owner, float *dev, size_t bytes, bool bf16,
                         const char *what)
{
    hs->off = off;
    st_status st = (bf16 ? host_tensor_offload_bf16 : host_tensor_offload)(off, &hs->h, dev, bytes, MEM_ACTIVATIONS,
                                                                            what);
    if (st) return st; /* dev is still the owner's */
    scratch_forget(owner, dev); /* its last reader is done: the device copy goes once the host has it */
    hs->on_host = true;
    return host_tensor_drop_device(off, &hs->h);
}

st_status host_side_fetch(host_side *hs) { return hs->on_host ? host_tensor_fetch(hs->off, &hs->h) : ST_OK; }

st_status micro_prefetch(block *b, block_saved *saved)
{
    (void)b;
    return saved ? host_side_fetch((host_side *)saved) : ST_OK;
}

st_status host_side_back(host_side *hs)
{
    if (!hs->on_host) return ST_OK;
    const st_status st = host_tensor_wait(hs->off, &hs->h);
    if (!st) hs->dev = hs->h.dev, hs->h.dev = NULL, hs->on_host = false;
    return st;
}

void host_side_release(host_side *hs, pool *p)
{
    if (hs->off) host_tensor_release(hs->off, &hs->h);
    pool_free(p, hs->dev);
    *hs = (host_side){0};
}
