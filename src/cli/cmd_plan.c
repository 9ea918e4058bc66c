/* `segtrain plan`: what a configuration will do, before anything runs: each sequence's segments and kept
 * blocks, what they hold, and the predicted peak device memory of a training step by tag. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "segtrain/dist.h"
#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/train.h"

static const char plan_help[] =
    "usage: segtrain plan --config C [--json] [--parts] [--ranks N] [--link-bandwidth RATE] [--gpu LIST]\n"
    "                    [--set key=value ...]\n"
    "\n"
    "Prints the checkpoint plan of every block sequence of the configured model, as\n"
    "  blocks 0-1 ckpt | 2-3 keep | 4-5 ckpt ...\n"
    "(ckpt: recomputed from the segment's boundary in backward; keep: keeps its activations; ffn: keeps the\n"
    "attention side and recomputes the feed-forward half), the bytes each part holds, and the predicted peak\n"
    "device memory of one training step at train_batch_size, by what it holds. Nothing is allocated or run.\n"
    "--json prints the same for machines. --parts also lists the weights by part (block indices as *: every\n"
    "block's expert weights as one line) and what was live at the predicted peak, by name and tag (a mixture\n"
    "of experts' routing state, a boundary, an attention's kept state). --ranks N gives one rank's memory in a\n"
    "data-parallel run of N ranks (mpirun -np N segtrain train): with zero_stage 1 its optimizer state is its\n"
    "share, and the line says what that saves; the gradients' reduction adds its scratch in host memory.\n"
    "With bucket_shapes (--set bucket_shapes=832x480,480x832), it first predicts the peak of every bucket and\n"
    "prints the plan its model is planned by (its own from gradient_checkpointing_bucket_plans, or the run's\n"
    "schedule), and the plan that follows is the largest one's: the run's peak. With data_backend_config the\n"
    "buckets are the data's: its images put in SimpleTuner's aspect buckets as train puts them (each backend's\n"
    "and bucket's line on stderr), one shape for each bucket that trains.\n"
    "With block swap (musubi_blocks_to_swap), or offload and --link-bandwidth, it says what crosses the host-device\n"
    "link in a step (the swapped weights, brought in at each swapped block's forward, recompute and backward; what\n"
    "offload sends out and brings back) and its seconds at the link's bandwidth: measured here (64 MiB copies), or\n"
    "--link-bandwidth RATE (e.g. 25GB/s, a PCIe 4 x16 figure) for another machine. The step waits for the swapped\n"
    "weights (each block's are brought in right before it runs, not prefetched); offload's copies run on the copy\n"
    "thread behind compute, taken as hidden, as advise prices them.\n"
    "--gpu LIST (h100, h200, l40s, a100, rtx4090, a profile .json, or all) also predicts the step's seconds on\n"
    "each GPU from its published peaks and bandwidths and the fraction of them each kind of op is assumed to reach\n"
    "(predictions, not measurements: docs/BENCHMARKS.md, \"Seconds on a named GPU\"), and says whether the\n"
    "peak fits its memory.\n";

#define PARTS_SHOWN 100

typedef struct plan_report {
    int64_t batch;
    size_t optimizer_bytes;
    pool_stats sim, host; /* the dry step's */
    op_profile work;      /* and the work its ops counted */
    link_traffic moved;   /* and what crossed the link */
    double link_rate;     /* bytes a second (0: the link is not said) */
    bool link_measured;
    gpu_profile gpus[8];  /* --gpu: the step predicted on each */
    int n_gpus;
} plan_report;

static size_t boundary_bytes(const seq_plan *p, const block_seq *s) { return seq_plan_boundary_bytes(p, s); }

static const char *mode_word(block_mode m) { return m == MODE_KEEP ? "keep" : m == MODE_FFN ? "ffn" : "ckpt"; }

static size_t kept_of(const seq_plan *p, const block_seq *s, int b)
{
    return s->blocks[b].kind->kept_bytes(&s->blocks[b], seq_plan_keep(p, b));
}

/* The bytes of every group of weights in host memory, and the largest group's (its device buffer). */
static size_t host_weight_bytes(const param_set *ps, size_t *most)
{
    size_t all = 0;
    *most = 0;
    for (int g = 0; g < ps->n_swap; g++) {
        all += ps->swap[g].bytes;
        *most = ps->swap[g].bytes > *most ? ps->swap[g].bytes : *most;
    }
    return all;
}

/* ramtorch (docs/WEIGHTS.md): how many linear layers' weights live on the host, and the device buffer. */
static void print_streamed(model *m)
{
    const param_set *ps = model_params(m);
    int linear = 0;
    for (int i = 0; i < ps->n; i++) linear += ps->items[i].linear;
    size_t most;
    const size_t all = host_weight_bytes(ps, &most);
    printf("ramtorch: the frozen weights of %d of the %d linear layers in host memory (", ps->n_swap, linear);
    print_bytes(stdout, all);
    printf("), each layer's brought into one device buffer (at most ");
    print_bytes(stdout, most);
    printf(") around each GEMM that reads it (forward, recompute, backward); adapters on the device\n");
}

/* group_offload_to_disk_path: the groups' files and their bytes. */
static void print_spilled(const param_set *ps, const char *dir, size_t most)
{
    size_t bytes = 0;
    for (int g = 1; g <= ps->n_swap; g++) bytes += param_spill_file_bytes(ps, g);
    printf("group offload to disk: host memory holds none of them: %d files under %s (group_<group>.safetensors, ",
           ps->n_swap, dir);
    print_bytes(stdout, bytes);
    printf("), written when the weights are loaded, each read into a host buffer (at most ");
    print_bytes(stdout, most);
    printf(") before its copy to the device\n");
}

/* enable_group_offload (docs/WEIGHTS.md): diffusers' groups in host memory (or on disk), and the device buffers. */
static void print_group_offload(model *m)
{
    const param_set *ps = model_params(m);
    const model_config *mc = model_get_config(m);
    size_t most;
    const size_t all = host_weight_bytes(ps, &most);
    const int blocks = ps->n_swap - (ps->step_group > 0);
    printf("group offload (%s", mc->group_offload_leaf ? "leaf_level" : "block_level");
    if (!mc->group_offload_leaf) printf(", %lld block%s a group", (long long)mc->group_offload_blocks,
                                        mc->group_offload_blocks > 1 ? "s" : "");
    printf("): every frozen weight in host memory (");
    print_bytes(stdout, all);
    printf(") in %d groups of %s", blocks, mc->group_offload_leaf ? "one linear layer" : "blocks");
    if (blocks) printf(" (%s .. %s)", ps->swap[0].label, ps->swap[blocks - 1].label);
    printf(", each brought into one device buffer (at most ");
    print_bytes(stdout, most);
    printf(") %s%s", mc->group_offload_leaf ? "around each GEMM that reads it" : "while its blocks run (forward, "
           "recompute, backward)", mc->group_offload_stream && !mc->group_offload_leaf ? ", the next group's copy "
           "started as a group comes in for a forward (use_stream)" : "");
    if (ps->step_group) {
        printf("; the rest (%s, ", ps->swap[ps->step_group - 1].label);
        print_bytes(stdout, ps->swap[ps->step_group - 1].bytes);
        printf(") brought in for each step");
    }
    printf("; adapters on the device\n");
    if (mc->group_offload_dir[0]) print_spilled(ps, mc->group_offload_dir, most);
}

/* musubi_blocks_to_swap (docs/WEIGHTS.md): which blocks' weights live on the host, and the device buffer. */
static void print_swap(model *m)
{
    const param_set *ps = model_params(m);
    if (ps->offload_tags) {
        print_group_offload(m);
        return;
    }
    if (ps->stream_layers) print_streamed(m);
    const int64_t n = model_get_config(m)->blocks_to_swap;
    if (!n || !ps->swap) return;
    block_seq *seqs;
    const int n_seq = model_sequences(m, &seqs);
    size_t most;
    const size_t all = host_weight_bytes(ps, &most);
    printf("block swap (musubi_blocks_to_swap %lld): the frozen weights of", (long long)n);
    for (int q = 0, said = 0; q < n_seq; q++) {
        const int k = model_swapped_blocks(m, q);
        if (k) printf("%s %s %d", said++ ? " and" : "", seqs[q].name, seqs[q].n - k);
        if (k > 1) printf("-%d", seqs[q].n - 1);
    }
    printf(" in host memory (");
    print_bytes(stdout, all);
    printf("), each block's brought into one device buffer (at most ");
    print_bytes(stdout, most);
    printf(") around its forward, recompute and backward; adapters on the device\n");
}

/* What crosses the link in a step and its seconds (advise.h's link_seconds_waited and link_seconds_all). */
static void print_link(const plan_report *r, model *m)
{
    const param_set *ps = model_params(m);
    /* use_stream's prefetch moves a group ahead of its use; the cost model waits for it all the same */
    const bool prefetches = ps->offload_tags && model_get_config(m)->group_offload_stream;
    const bool layers = ps->stream_layers && !ps->offload_tags;
    if (r->link_rate <= 0) return;
    const cost_rates rates = {.link_per_byte = 1 / r->link_rate};
    const link_traffic *t = &r->moved;
    char b[3][24];
    printf("host-device link per step: %s of %s weights in, %s of offload out and %s back; at %.2f GB/s (%s) "
           "%.4g s waited for the weights (brought in right before each %s, %s), %.4g s of "
           "offload copies hidden behind compute (the copy thread)\n", st_bytes(b[0], t->swap_in),
           ps->offload_tags ? "offloaded" : layers ? "streamed" : "swapped", st_bytes(b[1], t->offload_out),
           st_bytes(b[2], t->offload_in),
           r->link_rate * 1e-9, r->link_measured ? "measured here" : "--link-bandwidth",
           link_seconds_waited(&rates, t), ps->offload_tags ? "group's use" : layers ? "layer's GEMM" : "block runs",
           prefetches ? "priced as if not prefetched" : "not prefetched",
           link_seconds_all(&rates, t) - link_seconds_waited(&rates, t));
}

/* The step's seconds on a GPU: its ops at the profile's rates and the swapped weights it waits for. */
static double gpu_seconds(const plan_report *r, const gpu_profile *g)
{
    const cost_rates rates = gpu_profile_rates(g);
    return cost_predict_step(&rates, &r->work, &r->moved);
}

static void print_gpus(const plan_report *r)
{
    if (r->n_gpus)
        printf("predicted on a GPU (its published peaks at the fraction each kind of op is assumed to reach, unless "
               "measured; float32 GEMMs and attention, as segtrain's CUDA backend runs them):\n");
    for (int i = 0; i < r->n_gpus; i++) {
        const gpu_profile *g = &r->gpus[i];
        char have[24];
        printf("  %-30s %10.4g s/step%s; the peak %s its %s\n", g->name, gpu_seconds(r, g),
               g->measured ? " (measured efficiencies)" : "", r->sim.peak <= (size_t)g->memory_bytes ? "fits" : "exceeds",
               st_bytes(have, (size_t)g->memory_bytes));
    }
}

static void print_text(const ckpt_settings *cs, model *m, const plan_report *r)
{
    const model_config *mc = model_get_config(m);
    char line[1024];
    model_describe(mc, r->batch, line, sizeof line);
    printf("%s\n", line);
    if (cs->enabled)
        printf("checkpointing %s, interval %d, stride %d%s\n", ckpt_backend_name(cs->backend), cs->interval, cs->stride,
               cs->keep_attention_output ? ", checkpointed blocks keep attention's output" : "");
    else
        printf("checkpointing off\n");
    print_plans(stdout, m);
    block_seq *seqs;
    int n = model_sequences(m, &seqs);
    for (int i = 0; i < n; i++) {
        const seq_plan *p = model_plan(m, i);
        const block_seq *s = &seqs[i];
        printf("  %s: state ", s->name);
        print_bytes(stdout, state_bytes(s));
        printf(", %d boundaries ", p->n_segments);
        print_bytes(stdout, boundary_bytes(p, s));
        for (block_mode md = MODE_KEEP; md <= MODE_FFN; md++) {
            int count = 0;
            for (int b = 0; b < p->n; b++) count += p->mode[b] == md;
            if (!count) continue;
            printf(", %d %s blocks keep ", count, mode_word(md));
            for (int b = 0; b < p->n; b++)
                if (p->mode[b] == md) {
                    print_bytes(stdout, kept_of(p, s, b));
                    break;
                }
            printf(" each");
        }
        if (p->n_segments) {
            printf(", recompute keeps ");
            print_bytes(stdout, s->blocks[0].kind->kept_bytes(&s->blocks[0], KEEP_ALL));
            printf(" a block");
        }
        printf("\n");
        for (int g = 0, run; g < p->n_segments; g += run) { /* what each boundary holds, each tensor once */
            char desc[512], next[512];
            seq_plan_boundary(p, s, g, desc, sizeof desc);
            for (run = 1; g + run < p->n_segments; run++) { /* alike boundaries print as one line */
                seq_plan_boundary(p, s, g + run, next, sizeof next);
                if (strcmp(next, desc)) break;
            }
            const segment *sg = &p->segments[g], *last = &p->segments[g + run - 1];
            if (run > 1)
                printf("    boundaries of the %d segments from block %d to %d: %s each\n", run, sg->first, last->last,
                       desc);
            else if (sg->first == sg->last) printf("    boundary of block %d: %s\n", sg->first, desc);
            else printf("    boundary of blocks %d-%d: %s\n", sg->first, sg->last, desc);
        }
    }
    for (int i = 0; i < n; i++) {
        const seq_plan *p = model_plan(m, i);
        const size_t moved = seq_plan_host_bytes(p, &seqs[i]);
        if (!moved) continue;
        printf("  %s to host memory:", seqs[i].name);
        int offloading = 0;
        for (int b = 0; b < p->n; b++) offloading += p->attention_offload[b];
        if (offloading) {
            printf(" %s attention side (qkv, output, attention state, ", offloading == p->n ? "every block's" : "the");
            print_bytes(stdout, seqs[i].blocks[0].kind->offload_host_bytes(&seqs[i].blocks[0]));
            printf(" each)");
            if (offloading < p->n) printf(" of %d blocks", offloading);
        }
        for (int b = 0, first = 1; b < p->n; b++)
            if (p->host_input[b]) {
                printf("%s%d", first ? (offloading ? "; the input states of blocks " : " the input states of blocks ")
                                     : ",", b);
                first = 0;
            }
        printf("; ");
        print_bytes(stdout, moved);
        printf(" each way per step\n");
    }
    printf("work of a training step: %.4g TFLOP in GEMMs, %.4g TFLOP in attention (the dry step's count)\n",
           r->work.flops[OP_GEMM] * 1e-12, r->work.flops[OP_ATTENTION] * 1e-12);
    print_peak(stdout, "predicted peak device memory of a training step", &r->sim);
    if (r->host.peak) print_peak(stdout, "predicted peak host memory of a training step", &r->host);
    print_swap(m);
    print_link(r, m);
}

/* enable_group_offload in --json, as print_group_offload says it: the groups, each where it lives (host memory, or its
 * file under group_offload_to_disk_path) and its bytes; the device buffer; the weights of no group. */
static void group_offload_json(model *m, cJSON *root)
{
    const param_set *ps = model_params(m);
    const model_config *mc = model_get_config(m);
    if (!ps->offload_tags) return;
    size_t most;
    const size_t all = host_weight_bytes(ps, &most);
    cJSON *gj = cJSON_AddObjectToObject(root, "group_offload");
    cJSON_AddStringToObject(gj, "type", mc->group_offload_leaf ? "leaf_level" : "block_level");
    if (mc->group_offload_leaf) cJSON_AddNullToObject(gj, "blocks_per_group");
    else cJSON_AddNumberToObject(gj, "blocks_per_group", (double)mc->group_offload_blocks);
    cJSON_AddBoolToObject(gj, "use_stream", mc->group_offload_stream && !mc->group_offload_leaf);
    cJSON_AddNumberToObject(gj, "offloaded_bytes", (double)all);
    cJSON_AddNumberToObject(gj, "device_buffer_bytes", (double)most);
    if (mc->group_offload_dir[0]) cJSON_AddStringToObject(gj, "to_disk_path", mc->group_offload_dir);
    else cJSON_AddNullToObject(gj, "to_disk_path");
    cJSON *list = cJSON_AddArrayToObject(gj, "groups");
    for (int g = 1; g <= ps->n_swap; g++) {
        cJSON *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "label", ps->swap[g - 1].label);
        cJSON_AddStringToObject(one, "holds", g == ps->step_group ? "the rest, for each step"
                                             : mc->group_offload_leaf ? "one linear layer" : "blocks");
        cJSON_AddNumberToObject(one, "bytes", (double)ps->swap[g - 1].bytes);
        cJSON_AddStringToObject(one, "lives", mc->group_offload_dir[0] ? "disk" : "host");
        if (mc->group_offload_dir[0]) cJSON_AddNumberToObject(one, "file_bytes", (double)param_spill_file_bytes(ps, g));
        cJSON_AddItemToArray(list, one);
    }
}

static void print_json(model *m, const plan_report *r, const bucket_report *buckets, int n_buckets)
{
    const model_config *mc = model_get_config(m);
    cJSON *root = cJSON_CreateObject(), *model_j = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model_j, "family", mc->family);
    cJSON_AddStringToObject(model_j, "preset", mc->preset);
    cJSON_AddNumberToObject(model_j, "depth", (double)mc->depth);
    cJSON_AddNumberToObject(model_j, "hidden_size", (double)mc->hidden);
    cJSON_AddNumberToObject(model_j, "batch", (double)r->batch);
    cJSON *seqs_j = cJSON_AddArrayToObject(root, "sequences");
    block_seq *seqs;
    int n = model_sequences(m, &seqs);
    for (int i = 0; i < n; i++) {
        const seq_plan *p = model_plan(m, i);
        cJSON *sj = cJSON_CreateObject();
        cJSON_AddItemToArray(seqs_j, sj);
        char line[1024];
        seq_plan_format(p, line, sizeof line);
        cJSON_AddStringToObject(sj, "name", seqs[i].name);
        cJSON_AddStringToObject(sj, "plan", line);
        cJSON_AddStringToObject(sj, "fallback", p->fallback);
        cJSON *segs = cJSON_AddArrayToObject(sj, "segments");
        for (int g = 0; g < p->n_segments; g++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(p->segments[g].first));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(p->segments[g].last));
            cJSON_AddItemToArray(segs, pair);
        }
        cJSON *modes = cJSON_AddArrayToObject(sj, "modes"), *kept = cJSON_AddArrayToObject(sj, "kept_bytes");
        for (int b = 0; b < p->n; b++) {
            cJSON_AddItemToArray(modes, cJSON_CreateString(mode_word(p->mode[b])));
            cJSON_AddItemToArray(kept, cJSON_CreateNumber((double)kept_of(p, &seqs[i], b)));
        }
        cJSON_AddNumberToObject(sj, "state_bytes", (double)state_bytes(&seqs[i]));
        cJSON_AddNumberToObject(sj, "boundary_bytes", (double)boundary_bytes(p, &seqs[i]));
        cJSON *bj = cJSON_AddArrayToObject(sj, "boundaries");
        for (int g = 0; g < p->n_segments; g++) {
            char desc[512];
            cJSON *one = cJSON_CreateObject();
            const size_t bytes = seq_plan_boundary(p, &seqs[i], g, desc, sizeof desc);
            cJSON_AddNumberToObject(one, "first_block", p->segments[g].first);
            cJSON_AddNumberToObject(one, "last_block", p->segments[g].last);
            cJSON_AddNumberToObject(one, "bytes", (double)bytes);
            cJSON_AddStringToObject(one, "state", desc);
            cJSON_AddItemToArray(bj, one);
        }
    }
    cJSON *bj_all = n_buckets ? cJSON_AddArrayToObject(root, "buckets") : NULL;
    for (int i = 0; bj_all && i < n_buckets; i++) {
        char name[48];
        bucket_shape_name(&buckets[i].shape, name, sizeof name);
        cJSON *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "shape", name);
        cJSON_AddNumberToObject(one, "image_tokens", (double)buckets[i].tokens);
        cJSON_AddNumberToObject(one, "predicted_peak_device_bytes", (double)buckets[i].peak);
        cJSON_AddStringToObject(one, "plan", buckets[i].plan);
        cJSON_AddItemToArray(bj_all, one);
    }
    cJSON_AddNumberToObject(root, "predicted_peak_host_bytes", (double)r->host.peak);
    size_t moved = 0;
    for (int i = 0; i < n; i++) moved += seq_plan_host_bytes(model_plan(m, i), &seqs[i]);
    cJSON_AddNumberToObject(root, "bytes_to_host_per_step", (double)moved);
    cJSON_AddNumberToObject(root, "bytes_to_device_per_step", (double)moved);
    if (r->link_rate > 0) { /* as the text's line: only where it is said */
        const cost_rates rates = {.link_per_byte = 1 / r->link_rate};
        cJSON *lj = cJSON_AddObjectToObject(root, "link");
        cJSON_AddNumberToObject(lj, "swap_in_bytes", (double)r->moved.swap_in);
        cJSON_AddNumberToObject(lj, "offload_out_bytes", (double)r->moved.offload_out);
        cJSON_AddNumberToObject(lj, "offload_in_bytes", (double)r->moved.offload_in);
        cJSON_AddNumberToObject(lj, "bytes_per_second", r->link_rate);
        cJSON_AddBoolToObject(lj, "measured", r->link_measured);
        cJSON_AddNumberToObject(lj, "seconds_waited", link_seconds_waited(&rates, &r->moved));
        cJSON_AddNumberToObject(lj, "seconds_hidden", link_seconds_all(&rates, &r->moved) -
                                                          link_seconds_waited(&rates, &r->moved));
    }
    group_offload_json(m, root);
    cJSON_AddNumberToObject(root, "gemm_flops_per_step", r->work.flops[OP_GEMM]);
    cJSON_AddNumberToObject(root, "attention_flops_per_step", r->work.flops[OP_ATTENTION]);
    cJSON *peak = cJSON_AddObjectToObject(root, "predicted_peak_device_bytes");
    cJSON_AddNumberToObject(peak, "total", (double)r->sim.peak);
    for (int t = 0; t < MEM_TAG_COUNT; t++) cJSON_AddNumberToObject(peak, mem_tag_name(t), (double)r->sim.at_peak_by_tag[t]);
    cJSON *gj = r->n_gpus ? cJSON_AddArrayToObject(root, "gpus") : NULL;
    for (int i = 0; gj && i < r->n_gpus; i++) {
        cJSON *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "name", r->gpus[i].name);
        cJSON_AddNumberToObject(one, "sec_per_step", gpu_seconds(r, &r->gpus[i]));
        cJSON_AddBoolToObject(one, "fits", r->sim.peak <= (size_t)r->gpus[i].memory_bytes);
        cJSON_AddBoolToObject(one, "measured", r->gpus[i].measured);
        cJSON_AddStringToObject(one, "source", r->gpus[i].source);
        cJSON_AddItemToArray(gj, one);
    }
    char *text = cJSON_Print(root);
    if (text) puts(text);
    cJSON_free(text);
    cJSON_Delete(root);
}

/* A parameter's part: its name without the last component (weight, bias), each block or expert index as *. A LyCORIS
 * adapter's part is its module, whose path has underscores for dots, up to the key ("lycoris_transformer_blocks_0_
 * attn1_to_q.lokr_w1", ".lora_down.weight"). */
static void part_of(const char *name, char *out, size_t n)
{
    size_t k = 0;
    const char sep = strncmp(name, "lycoris_", 8) ? '.' : '_';
    const char *end = sep == '_' ? strchr(name, '.') : strrchr(name, '.');
    for (const char *p = name; p < (end ? end : name + strlen(name)) && k + 2 < n;) {
        const bool start = p == name || p[-1] == sep;
        size_t digits = strspn(p, "0123456789");
        if (start && digits && (p[digits] == sep || p[digits] == '.' || !p[digits])) out[k++] = '*', p += digits;
        else out[k++] = *p++;
    }
    out[k] = 0;
}

typedef struct weight_part {
    char name[PARAM_NAME_MAX];
    size_t bytes, tensors;
    unsigned held; /* bit QUANT_* + 2 for each quantized format, bit 1 bf16, bit 0 float32 */
    size_t on_host; /* tensors in host memory (musubi_blocks_to_swap, ramtorch) */
} weight_part;

/* How a parameter is held, and its bytes: a quantized one's packed data and bf16 scales (and shifts). */
static size_t held_bytes(const param *q, unsigned *held)
{
    if (q->quant) {
        const quant_layout l = quant_layout_of(q->quant, q->shape[0], q->numel / q->shape[0]);
        *held |= 1u << (q->quant + 2);
        return (size_t)l.data_bytes + (size_t)l.stats * sizeof(uint16_t);
    }
    *held |= q->bf16 ? 2u : 1u;
    return (size_t)q->numel * (q->bf16 ? sizeof(uint16_t) : sizeof(float));
}

static void print_held(unsigned held)
{
    const char *sep = "  ";
    for (int f = QUANT_INT4; f > QUANT_NONE; f--)
        if (held & (1u << (f + 2))) printf("%s%s", sep, quant_name((quant_format)f)), sep = " + ";
    if (held & 2u) printf("%sbf16", sep), sep = " + ";
    if (held & 1u) printf("%sfloat32", sep);
}

static int by_bytes_desc(const void *a, const void *b)
{
    const weight_part *x = a, *y = b;
    return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : strcmp(x->name, y->name);
}

static void print_parts(model *m, pool *device)
{
    param_set *ps = model_params(m);
    weight_part *w = calloc((size_t)ps->n + 1, sizeof *w);
    if (!w) return;
    int n = 0;
    for (int i = 0; i < ps->n; i++) {
        char name[PARAM_NAME_MAX];
        part_of(param_at(ps, i)->name, name, sizeof name);
        int j = 0;
        while (j < n && strcmp(w[j].name, name)) j++;
        if (j == n) snprintf(w[n++].name, sizeof w->name, "%s", name);
        const param *q = param_at(ps, i);
        w[j].bytes += held_bytes(q, &w[j].held), w[j].tensors++, w[j].on_host += q->swap_group > 0;
    }
    qsort(w, (size_t)n, sizeof *w, by_bytes_desc);
    printf("weights by part (%d parts; block and expert indices as *), and how they are held:\n", n);
    for (int j = 0; j < n && j < PARTS_SHOWN; j++) {
        printf("  %-64s %6zu tensors  ", w[j].name, w[j].tensors);
        print_bytes(stdout, w[j].bytes);
        print_held(w[j].held);
        if (w[j].on_host)
            printf(", %zu %s (%s)", w[j].on_host, ps->swap[0].file ? "on disk" : "on the host",
                   ps->offload_tags ? "group offload" : ps->stream_layers ? "streamed layers" : "swapped blocks");
        printf("\n");
    }
    if (n > PARTS_SHOWN) printf("  ... %d smaller parts\n", n - PARTS_SHOWN);
    free(w);
    pool_part parts[PARTS_SHOWN];
    const size_t all = pool_peak_parts(device, parts, PARTS_SHOWN);
    printf("live at the predicted peak, by name (%zu names):\n", all);
    for (size_t j = 0; j < all && j < PARTS_SHOWN; j++) {
        printf("  %-48s %-12s %6zu x  ", parts[j].what, mem_tag_name(parts[j].tag), parts[j].count);
        print_bytes(stdout, parts[j].bytes);
        printf("\n");
    }
    if (all > PARTS_SHOWN) printf("  ... %zu smaller names\n", all - PARTS_SHOWN);
}

/* --gpu: "all" (the built-in profiles) or a comma list of their keys and .json files */
static st_status parse_gpus(const char *list, gpu_profile *out, int *n)
{
    const gpu_profile *builtin;
    const int n_builtin = gpu_profiles_builtin(&builtin);
    *n = 0;
    if (!strcmp(list, "all")) {
        for (; *n < n_builtin && *n < 8; (*n)++) out[*n] = builtin[*n];
        return ST_OK;
    }
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *one = strtok_r(copy, ",", &save); one; one = strtok_r(NULL, ",", &save)) {
        if (*n == 8) return st_fail(ST_ERR_INVALID, "--gpu: at most 8 profiles");
        const st_status st = gpu_profile_find(one, &out[(*n)++]);
        if (st) return st;
    }
    return *n ? ST_OK : st_fail(ST_ERR_INVALID, "--gpu: no profile named");
}

int cmd_plan(int argc, char **argv)
{
    const char *config_path = NULL, *link = NULL, *gpus = NULL;
    bool json = false, parts = false;
    long long ranks = 1;
    const cli_flag flags[] = {{"--config", .text = &config_path}, {"--json", .on = &json}, {"--parts", .on = &parts},
                              {"--ranks", .whole = &ranks, .min = 1, .max = 1 << 20},
                              {"--link-bandwidth", .text = &link}, {"--gpu", .text = &gpus}, {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(plan_help, stdout), 0) : rc;
    size_t link_rate = 0;
    if (link && cli_size("segtrain plan", "--link-bandwidth", link, true, &link_rate)) return 2;
    config *cfg;
    cli_model cm = {0};
    st_status st = cli_load_config(config_path, &a, &cfg);
    bucket_report buckets[MODEL_SHAPES_MAX];
    int n_buckets = 0, largest = 0;
    bool from_data = false; /* the shapes are data_backend_config's buckets */
    if (!st) cli_data_buckets(&cfg, (int)ranks, &from_data);
    if (!st) st = cli_buckets(cfg, (int)ranks, NULL, buckets, &n_buckets, &largest);
    const bool listed = n_buckets > 1 || from_data;
    const char *cache = from_data ? config_string(cfg, "data_cache_dir") : "";
    if (!st && listed && !json && from_data)
        printf("%d aspect bucket%s of %s %s, each a training step's predicted peak; the plan below is the largest's:\n",
               n_buckets, n_buckets == 1 ? "" : "s", cache[0] ? "data_cache_dir" : "data_backend_config",
               cache[0] ? cache : config_string(cfg, "data_backend_config"));
    else if (!st && listed && !json)
        printf("%d buckets, each a training step's predicted peak; the plan below is the largest's:\n", n_buckets);
    if (!st && listed && !json) cli_print_buckets(buckets, n_buckets, largest, false);
    if (!st) st = cli_open_model(cfg, false, &cm);
    /* the plan that follows is the largest bucket's, on the run's model of that shape */
    model_run at = model_run_at(&cm, largest);
    /* a plan of what cannot train here is still a plan (of memory at the real size): train's refusal, said */
    if (!st && train_data_check(cfg, model_get_config(at.m)))
        st_warn("segtrain: warning: train refuses this config as it is: %s", st_error());
    if (!st) {
        plan_report r = {.batch = config_int(cfg, "train_batch_size")};
        if (gpus) st = parse_gpus(gpus, r.gpus, &r.n_gpus);
        const int64_t grads = model_params(at.m)->grad_count;
        r.optimizer_bytes = train_optimizer_bytes(cfg, model_params(at.m), (int)ranks);
        if (parts) pool_record_peak_parts(cm.device, true);
        link_traffic before;
        link_traffic_read(at.m, &before);
        ops_profile_start();
        if (!st) st = flow_step_dry(&at, r.batch, (int)ranks, &r.sim, &r.host);
        ops_profile_stop(&r.work);
        r.moved = link_traffic_since(at.m, &before);
        /* said where blocks swap (measured here unless given), or where it is given and offload moves something */
        r.link_rate = (double)link_rate;
        if (!st && !link_rate && r.moved.swap_in) {
            st = link_bandwidth_measure(&r.link_rate);
            r.link_measured = true;
        }
        if (!r.moved.swap_in && !r.moved.offload_out && !r.moved.offload_in) r.link_rate = 0;
        if (!st && json) print_json(at.m, &r, buckets, listed ? n_buckets : 0);
        else if (!st) print_text(&cm.cs, at.m, &r);
        if (!st && !json) print_gpus(&r);
        if (!st && !json && ranks > 1) {
            const size_t whole = train_optimizer_bytes(cfg, model_params(at.m), 1);
            char b[4][24];
            printf("data-parallel over %lld ranks, per rank: optimizer state %s (the whole state is %s%s%s); "
                   "the gradients' reduction adds %s of host scratch\n", ranks, st_bytes(b[0], r.optimizer_bytes),
                   st_bytes(b[1], whole), config_int(cfg, "zero_stage") == 1 ? ": ZeRO-1 saves " : "; zero_stage 1 "
                   "would keep a share", config_int(cfg, "zero_stage") == 1 ? st_bytes(b[2], whole - r.optimizer_bytes)
                   : "", st_bytes(b[3], (size_t)dist_scratch_floats_for(grads, (int)ranks) * sizeof(float)));
        }
        if (!st && parts && !json) print_parts(at.m, cm.device);
    }
    cli_close_model(&cm);
    config_free(cfg);
    return st ? cli_error("plan") : 0;
}
