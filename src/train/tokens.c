/* The token objective (objective.h's token_loss): SimpleTuner's HeartMuLa._autoregressive_token_loss, as cross_entropy
 * over the model's codebook-major logits with a weight a row: the audio frame mask of the row it predicts over the
 * batch's count of them, and for the decoder's codebooks over K - 1 times that. */
#include "segtrain/objective.h"

#include <string.h>

#include "segtrain/ops.h"

/* Each logits row's target (row t + 1's codebook k of its sample) and weight, from the tokens and masks */
typedef struct token_rows {
    const model_config *c;
    int64_t batch;
    const float *tokens, *cond;
    float *targets, *weights;
} token_rows;

static st_status fill_rows(void *arg)
{
    const token_rows *r = arg;
    const model_config *c = r->c;
    const int64_t K = c->channels - 1, S = c->frames, F = r->batch * (S - 1), per = model_cond_len(c);
    double frames = 0;
    for (int64_t b = 0; b < r->batch; b++)
        for (int64_t t = 1; t < S; t++) frames += r->cond[b * per + S * (K + 1) + t];
    const double n = frames > 1.0 ? frames : 1.0; /* SimpleTuner's clamp_min(1) */
    for (int64_t k = 0; k < K; k++)
        for (int64_t b = 0; b < r->batch; b++)
            for (int64_t t = 0; t < S - 1; t++) {
                const int64_t row = k * F + b * (S - 1) + t;
                r->targets[row] = r->tokens[(b * S + t + 1) * (K + 1) + k];
                r->weights[row] = (float)(r->cond[b * per + S * (K + 1) + t + 1] / (k ? n * (double)(K - 1) : n));
            }
    return ST_OK;
}

st_status token_loss(model *m, const flow_batch *b, bool backward, float *loss)
{
    const model_config *c = model_get_config(m);
    st_status st = model_check_batch(m, b->batch);
    if (st) return st;
    const int64_t rows = (c->channels - 1) * b->batch * (c->frames - 1), n = b->batch * model_token_logits(c);
    pool *p = model_params(m)->pool;
    float *targets = NULL, *weights = NULL, *dlogits = NULL;
    st = pool_alloc(p, (size_t)rows * sizeof(float), MEM_ACTIVATIONS, "tokens.targets", (void **)&targets);
    if (!st) st = pool_alloc(p, (size_t)rows * sizeof(float), MEM_ACTIVATIONS, "tokens.weights", (void **)&weights);
    if (!st) st = host_loop(targets, fill_rows, &(token_rows){c, b->batch, b->x0, b->cond, targets, weights});
    const float *logits;
    if (!st) st = model_forward(m, b->x0, NULL, b->cond, b->batch, backward, &logits);
    if (!st) {
        st = cross_entropy_forward(logits, targets, weights, rows, c->classes, loss);
        if (!st && backward)
            st = pool_alloc_zero(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "tokens.dlogits", (void **)&dlogits);
        if (!st && backward) {
            cross_entropy_backward(dlogits, logits, targets, weights, rows, c->classes,
                                   b->grad_scale ? b->grad_scale : 1.0f);
            st = model_backward(m, dlogits);
        }
        model_release(m);
    }
    pool_free(p, dlogits);
    pool_free(p, weights);
    pool_free(p, targets);
    return st;
}
