/* GPU profiles (advise.h): a step's seconds on a named GPU from its published figures, through the same cost model
 * as this machine's rates. */
#include "segtrain/advise.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "segtrain/fileio.h"

/* What fraction of its peak each kind of op reaches on segtrain's CUDA backend: assumptions until gpu-check.sh
 * measures them (docs/BENCHMARKS.md, "Seconds on a named GPU"). cuBLAS's float32 GEMMs reach most of the FP32
 * peak at training shapes; segtrain's flash attention is its own float32 kernel without tensor cores; the
 * memory-bound kinds stream at a part of the bandwidth; the link is PCIe at its usual effective fraction. */
#define ASSUMED {0.75, 0.35, 0.6, 0.7}
#define PCIE_EFFECTIVE 0.8

/* Dense peaks from NVIDIA's datasheets (no structured sparsity); the memory as nvidia-smi totals it (the CUDA
 * context takes a few hundred MiB of it); the link is the card's PCIe x16, one direction. */
#define MIB 1048576.0
static const gpu_profile builtins[] = {
    {"h100", "NVIDIA H100 SXM5 80GB", 81559 * MIB, 66.9e12, 494.7e12, 989.4e12, 3.35e12, 64e9 * PCIE_EFFECTIVE, ASSUMED,
     "NVIDIA H100 Tensor Core GPU datasheet (SXM5; PCIe 5.0 x16)", false},
    {"h200", "NVIDIA H200 SXM 141GB", 143771 * MIB, 66.9e12, 494.7e12, 989.4e12, 4.8e12, 64e9 * PCIE_EFFECTIVE, ASSUMED,
     "NVIDIA H200 Tensor Core GPU datasheet (SXM; PCIe 5.0 x16)", false},
    {"l40s", "NVIDIA L40S 48GB", 46068 * MIB, 91.6e12, 183e12, 362.05e12, 0.864e12, 32e9 * PCIE_EFFECTIVE, ASSUMED,
     "NVIDIA L40S datasheet (PCIe 4.0 x16)", false},
    {"a100", "NVIDIA A100 SXM4 80GB", 81920 * MIB, 19.5e12, 156e12, 312e12, 2.039e12, 32e9 * PCIE_EFFECTIVE, ASSUMED,
     "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB; PCIe 4.0 x16)", false},
    {"rtx4090", "NVIDIA GeForce RTX 4090 24GB", 24564 * MIB, 82.6e12, 82.6e12, 165.2e12, 1.008e12, 32e9 * PCIE_EFFECTIVE,
     ASSUMED, "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090; bf16 with float32 accumulation; PCIe 4.0 x16)", false},
};
#define N_BUILTINS (int)(sizeof builtins / sizeof *builtins)

int gpu_profiles_builtin(const gpu_profile **out)
{
    *out = builtins;
    return N_BUILTINS;
}

/* A profile's number: a positive JSON number under key, within (0, max]. */
static st_status profile_number(const cJSON *j, const char *path, const char *key, double max, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || v->valuedouble > max)
        return st_fail(ST_ERR_FORMAT, "%s: \"%s\" must be a number in (0, %g]", path, key, max);
    *out = v->valuedouble;
    return ST_OK;
}

/* {"name", "memory_bytes", "fp32_flops", "tf32_flops", "bf16_flops", "memory_bytes_per_second",
 *  "link_bytes_per_second", "efficiency": {"gemm", "attention", "normalization", "elementwise"}, "source",
 *  "measured"} */
static st_status profile_from_json(const cJSON *j, const char *path, gpu_profile *g)
{
    static const char *const kinds[OP_KIND_COUNT] = {"gemm", "attention", "normalization", "elementwise"};
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name"), *eff = cJSON_GetObjectItemCaseSensitive(j, "efficiency");
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(j, "source");
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) || !cJSON_IsObject(eff))
        return st_fail(ST_ERR_FORMAT, "%s: a GPU profile is an object with a \"name\" and an \"efficiency\" object",
                       path);
    snprintf(g->name, sizeof g->name, "%s", name->valuestring);
    snprintf(g->source, sizeof g->source, "%s", cJSON_IsString(source) ? source->valuestring : path);
    g->measured = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "measured"));
    st_status st = profile_number(j, path, "memory_bytes", 1e15, &g->memory_bytes);
    if (!st) st = profile_number(j, path, "fp32_flops", 1e18, &g->fp32_flops);
    if (!st) st = profile_number(j, path, "tf32_flops", 1e18, &g->tf32_flops);
    if (!st) st = profile_number(j, path, "bf16_flops", 1e18, &g->bf16_flops);
    if (!st) st = profile_number(j, path, "memory_bytes_per_second", 1e15, &g->memory_rate);
    if (!st) st = profile_number(j, path, "link_bytes_per_second", 1e15, &g->link_rate);
    for (int k = 0; !st && k < OP_KIND_COUNT; k++) st = profile_number(eff, path, kinds[k], 1, &g->efficiency[k]);
    return st;
}

st_status gpu_profile_find(const char *name_or_path, gpu_profile *out)
{
    for (int i = 0; i < N_BUILTINS; i++)
        if (!strcasecmp(name_or_path, builtins[i].key)) {
            *out = builtins[i];
            return ST_OK;
        }
    if (!strstr(name_or_path, ".json"))
        return st_fail(ST_ERR_INVALID, "GPU profile \"%s\": not one of h100, h200, l40s, a100, rtx4090, nor a .json "
                       "file", name_or_path);
    FILE *f;
    st_status st = file_fopen_regular(name_or_path, &f);
    if (st) return st;
    char text[1 << 14];
    const size_t len = fread(text, 1, sizeof text - 1, f);
    const bool whole = feof(f);
    fclose(f);
    text[len] = 0;
    if (!whole) return st_fail(ST_ERR_FORMAT, "%s: a GPU profile is under 16 KiB", name_or_path);
    cJSON *j = cJSON_Parse(text);
    *out = (gpu_profile){0};
    snprintf(out->key, sizeof out->key, "file");
    st = j ? profile_from_json(j, name_or_path, out) : st_fail(ST_ERR_FORMAT, "%s: not JSON", name_or_path);
    cJSON_Delete(j);
    return st;
}

cost_rates gpu_profile_rates(const gpu_profile *g)
{
    /* segtrain's CUDA GEMMs run in float32 (CUBLAS_COMPUTE_32F, no TF32: docs/CUDA.md), and so does its attention */
    cost_rates r = {.link_per_byte = 1 / g->link_rate};
    r.per_unit[OP_GEMM] = 1 / (g->fp32_flops * g->efficiency[OP_GEMM]);
    r.per_unit[OP_ATTENTION] = 1 / (g->fp32_flops * g->efficiency[OP_ATTENTION]);
    r.per_unit[OP_NORM] = 1 / (g->memory_rate * g->efficiency[OP_NORM]);
    r.per_unit[OP_POINTWISE] = 1 / (g->memory_rate * g->efficiency[OP_POINTWISE]);
    return r;
}
