#!/usr/bin/env bash
# The config front door from the command line: refused values and keys get one line that names them and what is
# accepted, typos a did-you-mean, and --lenient (a global option) turns key typos into warnings.
# Usage: cli_config_test.sh path/to/segtrain path/to/source
bin=$1 src=$2
. "$src/tests/clikit.sh"
# lacks RC DESCRIPTION PATTERN -- COMMAND...: exit code RC and PATTERN nowhere in stdout+stderr
lacks() {
  local rc=$1 what=$2 pattern=$3; shift 4
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && ! grep -qE -- "$pattern" <<<"$out"; then ok "$what"; else bad "$what (exit $got): $out"; fi
}
# one_line DESCRIPTION -- COMMAND...: the command fails (exit 1) with exactly one line
one_line() {
  local what=$1; shift 2
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; then ok "$what"; else bad "$what (exit $got): $out"; fi
}

# optimizer numbers that made the loss NaN at step 2, from a file and from --set, and their neighbours that work
echo '{"adam_epsilon": 0}' > eps0.json
expect 1 "adam_epsilon 0 in a file" "eps0.json: adam_epsilon: 0 is not a number > 0" -- "$bin" plan --config eps0.json
one_line "adam_epsilon 0: one line" -- "$bin" plan --config eps0.json
expect 1 "adam_epsilon 0 by --set" "--set: adam_epsilon: \"0\" is not a number > 0" -- "$bin" plan --set adam_epsilon=0
expect 1 "adam_beta2 1" "adam_beta2: \"1\" is not a number in \[0, 1\)" -- "$bin" plan --set adam_beta2=1
expect 1 "optimizer_beta1 1 (the alias)" "adam_beta1: \"1.0\" is not a number in \[0, 1\)" -- \
  "$bin" plan --optimizer_beta1 1.0
expect 1 "learning_rate 0" "learning_rate: \"0\" is not a number > 0" -- "$bin" plan --set learning_rate=0
expect 1 "adam_weight_decay below 0" "adam_weight_decay: \"-1\" is not a number >= 0" -- \
  "$bin" plan --set adam_weight_decay=-1
expect 0 "a tiny epsilon and beta2 0.9999 plan" "^model dit-tiny" -- \
  "$bin" plan --set adam_epsilon=1e-30 --set adam_beta2=0.9999 --set learning_rate=1e-9

# numbers as text: decimal only, for number and integer keys alike
for v in 0x10 0X1p3 inf nan infinity 1e-4x " 1"; do
  expect 1 "learning_rate '$v' refused" "learning_rate: \"$v\" is not a number > 0" -- "$bin" plan --set "learning_rate=$v"
  expect 1 "seed '$v' refused" "seed: \"$v\" is not an integer >= 0" -- "$bin" plan --set "seed=$v"
done
for v in 0x10 0X1p3 inf nan 2x; do # a command's own number options: the same rule
  expect 2 "sample --guidance '$v' refused" "^segtrain sample: --guidance takes a number >= 0, got '$v'$" -- \
    "$bin" sample --config missing.json --weights w.safetensors --out never.png --guidance "$v"
done
echo '{"learning_rate": "0x10", "lr_power": "nan"}' > hex.json
expect 1 "hex and nan in a file: both reported" "2 errors in the config" -- "$bin" plan --config hex.json

# a key one edit from a known one is a typo: an error, unless --lenient
echo '{"learning_rte": 3e-4, "report_to": "none"}' > typo.json
expect 1 "learning_rte in a file is an error" "typo.json: unknown key \"learning_rte\" \(did you mean learning_rate\?\)" -- \
  "$bin" plan --config typo.json
one_line "learning_rte: one line" -- "$bin" plan --config typo.json
expect 1 "the error says how to get a warning instead" "segtrain --lenient" -- "$bin" plan --config typo.json
expect 0 "--lenient makes it a warning" "warning: .*ignoring keys.*learning_rte \(did you mean learning_rate\?\)" -- \
  "$bin" --lenient plan --config typo.json
echo '{"trian_batch_size": 2, "leanring_rate": 1e-4}' > typo2.json
expect 1 "every typo reported, swaps too" "2 errors in the config" -- "$bin" plan --config typo2.json
echo '{"lora_dropout": 0.1, "validation_prompt": "a cat"}' > st.json
expect 0 "SimpleTuner keys segtrain does not read stay a warning" "warning: .*ignoring keys" -- "$bin" plan --config st.json
expect 1 "a checkpointing typo is an error even with --lenient" "did you mean gradient_checkpointing_interval\?" -- \
  "$bin" --lenient plan --config <(echo '{"gradient_checkpointing_intervall": 2}')
expect 0 "--help names --lenient" "--lenient" -- "$bin" --help
# a sweep's cells run in child processes: --lenient reaches them
"$bin" --threads 1 --lenient sweep --config typo.json --modes none --warmup 0 --steps 1 --out sw > /dev/null 2>&1
grep -qE "^\| none \| [0-9.]+ s / " sw/sweep.md 2>/dev/null && ok "--lenient reaches the sweep's cells" ||
  bad "--lenient sweep: $(cat sw/sweep.md sw/cells/* 2>&1 | head -20)"

# the command line: a did-you-mean for a typo, and global options placed after the command
expect 2 "a config key's typo as an option" \
  "^segtrain plan: unknown option '--gradient_checkpointing_intervall' \(did you mean --gradient_checkpointing_interval\?\)$" -- \
  "$bin" plan --gradient_checkpointing_intervall 2
lacks 2 "no hint that the key needs --set" "--set key=value" -- "$bin" plan --gradient_checkpointing_intervall 2
expect 2 "an option's typo" "unknown option '--confg' \(did you mean --config\?\)" -- "$bin" plan --confg x.json
expect 2 "an unknown option, far from any" "unknown option '--frobnicate': neither an option of segtrain plan" -- \
  "$bin" plan --frobnicate 3
expect 2 "--threads after the command" \
  "^segtrain plan: --threads is a global option: it goes before the command \(segtrain --threads 1 plan \.\.\.\)$" -- \
  "$bin" plan --threads 1
expect 2 "--threads=2 after the command" "segtrain --threads 2 train" -- "$bin" train --threads=2
expect 2 "--lenient after the command" "--lenient is a global option: it goes before the command \(segtrain --lenient plan" -- \
  "$bin" plan --config typo.json --lenient

# presets and flavours
echo '{"model_family": "flux", "model_flavour": "tiny"}' > ftiny.json
expect 1 "flavour tiny points at the preset" "\"tiny\" is not a flavour of flux .*give model_preset: flux-tiny" -- \
  "$bin" plan --config ftiny.json
expect 1 "a misspelt preset: the nearest first" "model_preset: \"dit-s3\" is not one of its [0-9]+ choices; nearest: dit-s2, " -- \
  "$bin" plan --set model_preset=dit-s3
expect 1 "model_preset=? lists every preset (scripts/plan_snapshot.sh reads the list)" \
  "model_preset: \"\?\" is not one of its [0-9]+ choices; .*\(all: dit-tiny, dit-s2, .*stable-cascade-c-lite.*\)$" -- \
  "$bin" plan --set model_preset=?
echo '{"model_family": "fluxx", "model_preset": "dit-s3", "seed": "x"}' > three.json
out=$("$bin" plan --config three.json 2>&1)
if [ $? -eq 1 ] && awk 'NR == 1 && /^segtrain plan: 3 errors in the config:$/ {n++} NR == 2 && /^  model_family: "fluxx" / {n++}
    NR == 3 && /^  model_preset: "dit-s3" / {n++} NR == 4 && /^  three.json: seed: "x" is not / {n++} END {exit n != 4}' <<<"$out"
then ok "the family's and the preset's lines lead the config's own"; else bad "three errors: $out"; fi
echo '{"model_family": "dit", "model_preset": "dit-s2"}' > s2.json
expect 0 "the file's preset" "^model dit-s2 " -- "$bin" plan --config s2.json
expect 0 "--set model_preset= clears the file's preset" "^model dit-tiny " -- "$bin" plan --config s2.json --set model_preset=
echo '{"model_family": "flux", "model_preset": "flux-tiny"}' > f.json
expect 0 "cleared, the preset comes from the family" "^model flux-dev " -- "$bin" plan --config f.json --set model_preset=

# LyCORIS: lycoris_config is read (relative to the working directory, as SimpleTuner reads it), each refusal one line
st=$src/tests/fixtures/simpletuner
lacks 0 "SimpleTuner's sdxl LoKr example plans from its folder, no warning about lycoris_config" "lycoris_config" -- \
  bash -c "cd '$st' && '$bin' plan --config sdxl.lycoris-lokr.json"
expect 1 "lycoris_config not found from elsewhere" "lycoris_config: cannot read config/examples/sdxl.lycoris-lokr/lycoris_config.json" -- \
  "$bin" plan --config "$st/sdxl.lycoris-lokr.json"
one_line "lycoris_config not found: one line" -- "$bin" plan --config "$st/sdxl.lycoris-lokr.json"
one_line "lora_type lycoris without lycoris_config: one line" -- "$bin" plan --config <(echo '{"model_type": "lora", "lora_type": "lycoris", "model_family": "sdxl"}')
expect 1 "a family not mapped onto LyCORIS's classes" "lora_type lycoris: dit's modules are not mapped" -- \
  "$bin" plan --set model_type=lora --set lora_type=lycoris --set lycoris_config=x.json
plan_sdxl_lycoris=("$bin" plan --set model_family=sdxl --set model_type=lora --set lora_type=lycoris)
echo '{"algo": "ia3", "apply_preset": {"target_module": ["Attention"]}}' > ia3.json
expect 1 "algo ia3 is refused by name" "ia3.json: algo ia3 is not built; segtrain builds LyCORIS's lokr, loha, lora \\(locon\\) and full" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=ia3.json
echo '{"algo": "LoHa", "apply_preset": {"target_module": ["Attention"], "module_algo_map": {"Attention": {"algo": "LoHa"}}}}' > case.json
expect 1 "a module_algo_map algo is matched as written" "case.json: algo \"LoHa\" is not one of the lycoris-lora package's" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=case.json
for algo in loha LoHa lora locon full; do
  echo "{\"algo\": \"$algo\", \"linear_dim\": 2, \"apply_preset\": {\"target_module\": [\"Attention\"]}}" > $algo.json
  expect 0 "algo $algo plans on sdxl, its adapters in the parts" "lycoris_down_blocks_\\*_attentions_\\*_transformer_blocks_\\*_attn1_to_q " -- \
    "${plan_sdxl_lycoris[@]}" --set lycoris_config=$algo.json --parts
done
# LoCon on the U-Nets' convolutions: conv_dim for a kernel over 1 x 1, linear_dim for a 1 x 1 (sd1x's proj_in)
echo '{"algo": "locon", "conv_dim": 8, "conv_alpha": 4, "apply_preset": {"target_module": ["ResnetBlock2D"]}}' > conv.json
expect 0 "LoCon with conv_dim plans on sdxl's ResnetBlock2Ds, their convolutions in the parts" \
  "lycoris_down_blocks_\\*_resnets_\\*_conv1 " -- "${plan_sdxl_lycoris[@]}" --set lycoris_config=conv.json --parts
echo '{"algo": "lora", "apply_preset": {"target_module": [], "target_name": ["down_blocks\\.1\\.attentions"]}}' > names.json
expect 0 "LoCon on sd1x's 1 x 1 Conv2d proj_in plans" "lycoris_down_blocks_\\*_attentions_\\*_proj_in " -- \
  "$bin" plan --set model_family=sd1x --set model_type=lora --set lora_type=lycoris --set lycoris_config=names.json --parts
# LoKr on a convolution (the kernel in lokr_w2): sd1x's 1 x 1 Conv2d proj_in, sdxl's Linear one
echo '{"algo": "lokr", "apply_preset": {"target_module": [], "target_name": ["down_blocks\\.1\\.attentions"]}}' > lokr_names.json
expect 0 "LoKr on sd1x's 1 x 1 Conv2d proj_in plans" "lycoris_down_blocks_\\*_attentions_\\*_proj_in " -- \
  "$bin" plan --set model_family=sd1x --set model_type=lora --set lora_type=lycoris --set lycoris_config=lokr_names.json --parts
expect 0 "the same names plan on sdxl, whose proj_in is a Linear" "lycoris_down_blocks_\\*_attentions_\\*_proj_in " -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=lokr_names.json --parts
# Stable Cascade's depthwise convolutions (groups = channels): adapted, rebuilt as the package does; LoKr's bypass,
# which the package runs into a RuntimeError there, refused; its other convolutions refused, named
echo '{"algo": "lora", "apply_preset": {"target_module": [], "target_name": ["down_blocks\\.0\\.0"]}}' > depthwise.json
expect 0 "LoCon on Stable Cascade's depthwise convolution plans, its adapter in the parts" \
  "lycoris_down_blocks_\\*_\\*_depthwise " -- "$bin" plan --set model_family=stable_cascade --set model_type=lora \
  --set lora_type=lycoris --set lycoris_config=depthwise.json --parts
echo '{"algo": "lokr", "bypass_mode": true, "apply_preset": {"target_module": [], "target_name": ["down_blocks\\.0\\.0"]}}' > dw_bypass.json
expect 1 "LoKr under bypass_mode on a depthwise convolution is refused, named, as the package fails there" \
  "down_blocks.0.0.depthwise.weight is a depthwise convolution \\(groups [0-9]+\\) that the lycoris_config adapts with lokr under bypass_mode" -- \
  "$bin" plan --set model_family=stable_cascade --set model_type=lora --set lora_type=lycoris --set lycoris_config=dw_bypass.json
echo '{"algo": "lora", "apply_preset": {"target_module": [], "target_name": ["embedding"]}}' > cascade_emb.json
expect 1 "Stable Cascade's embedding convolution is refused, named" \
  "embedding.1.weight is a convolution inside the lycoris_config's targets" -- \
  "$bin" plan --set model_family=stable_cascade --set model_type=lora --set lora_type=lycoris --set lycoris_config=cascade_emb.json
echo '{"algo": "lokr", "apply_preset": {"target_name": ["down_blocks\\.1\\.attentions"]}}' > default.json
expect 1 "apply_preset without target_module is refused (the package keeps its default classes)" \
  "default.json: apply_preset has no target_module, so the package keeps its default target classes" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=default.json
echo '{"algo": "loha", "use_tucker": true, "apply_preset": {"target_module": ["Attention"]}}' > tucker.json
expect 1 "use_tucker is refused with the reason" "tucker.json: use_tucker \\(Tucker decomposition\\) is not built" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=tucker.json
echo '{"algo": "full", "bypass_mode": true, "apply_preset": {"target_module": ["Attention"]}}' > bypass.json
expect 1 "bypass_mode with full is refused, as the package refuses it" "bypass.json: bypass_mode true with algo full for Attention" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=bypass.json
expect 1 "algo full on a quantized base is refused, as the package refuses it" "int8-quanto with LyCORIS algo full: lycoris-lora refuses" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=full.json --set base_model_precision=int8-quanto
echo '{"algo": "lokr", "rank_dropout": 0.1, "apply_preset": {"target_module": ["Attention"]}}' > drop.json
expect 1 "rank_dropout is refused" "drop.json: rank_dropout 0.1; LyCORIS's dropouts are not built" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=drop.json
echo '{"algo": "lokr", "apply_preset": {"target_module": ["ResnetBlock2D"]}}' > resnet.json
expect 0 "LoKr on sdxl's ResnetBlock2Ds plans, their convolutions in the parts" \
  "lycoris_down_blocks_\\*_resnets_\\*_conv1 " -- "${plan_sdxl_lycoris[@]}" --set lycoris_config=resnet.json --parts
echo '{"algo": "lokr", "apply_preset": {"target_module": ["BasicTransformerBlock"]}}' > block.json
expect 1 "a class segtrain does not map" "targets BasicTransformerBlock, a module class segtrain does not map onto sdxl" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=block.json
echo '{"algo": "lokr", "linear_dim": 4, "apply_preset": {"target_module": ["Attention"]}, "preset": "full"}' > preset.json
expect 1 "a key neither reads" "preset.json: preset is not a key" -- \
  "${plan_sdxl_lycoris[@]}" --set lycoris_config=preset.json
expect 0 "lora_type standard plans" "^model " -- "$bin" plan --set model_type=lora --set lora_type=standard

# ramtorch (docs/WEIGHTS.md): its refusals, one line each naming the key
plan_dit_ramtorch=("$bin" plan --set model_preset=dit-tiny --set model_type=lora --set lora_rank=4 --set ramtorch=true)
expect 1 "ramtorch with block swap is refused, as SimpleTuner refuses it" \
  "ramtorch is incompatible with musubi_blocks_to_swap \(SimpleTuner refuses the pair\)" -- \
  "${plan_dit_ramtorch[@]}" --set musubi_blocks_to_swap=2
expect 1 "ramtorch with group offload is refused, as SimpleTuner refuses it" \
  "ramtorch cannot be used together with enable_group_offload" -- "${plan_dit_ramtorch[@]}" --set enable_group_offload=true
expect 1 "ramtorch_transformer_percent above 100" "ramtorch_transformer_percent: \"101\" is not a number in \[0, 100\]" -- \
  "${plan_dit_ramtorch[@]}" --set ramtorch_transformer_percent=101
expect 1 "ramtorch_target_modules selecting no layer, with a name as the patterns see it" \
  "ramtorch_target_modules \"transformer_blocks\.\*\" selects none of the dit model's linear layers .*such as blocks\.0\.attn\.qkv" -- \
  "${plan_dit_ramtorch[@]}" --set "ramtorch_target_modules=transformer_blocks.*"
expect 1 "ramtorch under full fine-tuning names the trained weight" \
  "ramtorch: blocks\.0\.attn\.qkv\.weight trains \(full fine-tuning\)" -- \
  "$bin" plan --set model_preset=dit-tiny --set ramtorch=true
one_line "ramtorch's refusal is one line" -- "${plan_dit_ramtorch[@]}" --set musubi_blocks_to_swap=2
expect 0 "plan --parts marks the streamed layers' parts" "blocks\.\*\.attn\.qkv .* 8 on the host \(streamed layers\)" -- \
  "${plan_dit_ramtorch[@]}" --parts --set "ramtorch_target_modules=*.qkv"
expect 0 "plan says which layers stream and what crosses the link" \
  "ramtorch: the frozen weights of 4 of the 20 linear layers in host memory" -- \
  "${plan_dit_ramtorch[@]}" --set "ramtorch_target_modules=blocks.*" --set ramtorch_transformer_percent=20

# group offload (docs/WEIGHTS.md): its refusals, what plan says, and a run whose groups live in files
plan_dit_groups=("$bin" plan --set model_preset=dit-tiny --set model_type=lora --set lora_rank=4 --set enable_group_offload=true)
expect 1 "group offload with block swap is refused, naming both" \
  "enable_group_offload cannot be used together with musubi_blocks_to_swap" -- "${plan_dit_groups[@]}" --set musubi_blocks_to_swap=2
expect 1 "group offload on a U-Net is refused, as SimpleTuner refuses it" \
  "enable_group_offload: group offload is only supported for transformer-based models" -- \
  "$bin" plan --set model_preset=sdxl-tiny --set model_type=lora --set lora_rank=4 --set enable_group_offload=true
expect 1 "group offload under full fine-tuning is refused" "enable_group_offload: full fine-tuning" -- \
  "$bin" plan --set model_preset=dit-tiny --set enable_group_offload=true
expect 1 "group_offload_type takes diffusers' two" "group_offload_type" -- "${plan_dit_groups[@]}" --set group_offload_type=module
one_line "group offload's refusal is one line" -- "${plan_dit_groups[@]}" --set musubi_blocks_to_swap=2
expect 0 "plan says where the groups live" "group offload \(block_level, 2 blocks a group\): every frozen weight in host memory .* in 2 groups of blocks \(blocks_0_1 \.\. blocks_2_3\)" -- \
  "${plan_dit_groups[@]}" --set group_offload_blocks_per_group=2
expect 0 "plan --parts marks the offloaded parts" "blocks\.\*\.attn\.qkv .* 8 on disk \(group offload\)" -- \
  "${plan_dit_groups[@]}" --parts --set group_offload_to_disk_path=never-made
[ ! -e never-made ] && ok "a plan writes no group file" || bad "plan made never-made"
expect 0 "leaf_level streams each linear layer" "group offload \(leaf_level\): .* in 20 groups of one linear layer" -- \
  "${plan_dit_groups[@]}" --set group_offload_type=leaf_level
# plan --json says the groups as the text does: each group's label, bytes and where it lives, the device buffer
text=$("${plan_dit_groups[@]}" --set group_offload_blocks_per_group=2 --set group_offload_to_disk_path=never-made 2>/dev/null)
json=$("${plan_dit_groups[@]}" --json --set group_offload_blocks_per_group=2 --set group_offload_to_disk_path=never-made \
  2>/dev/null | tr -d ' \n\t')
grep -q '"group_offload":{"type":"block_level","blocks_per_group":2,"use_stream":false,"offloaded_bytes":[0-9]*,"device_buffer_bytes":597504,"to_disk_path":"never-made","groups":\[{"label":"blocks_0_1","holds":"blocks","bytes":597504,"lives":"disk","file_bytes":[0-9]*},{"label":"blocks_2_3",.*{"label":"transformer_unmatched_group","holds":"therest,foreachstep","bytes":127040,"lives":"disk"' <<<"$json" &&
  grep -q "in 2 groups of blocks (blocks_0_1 .. blocks_2_3), each brought into one device buffer (at most 583.5 KiB) .* the rest (transformer_unmatched_group, 124.1 KiB)" <<<"$text" &&
  [ "$(grep -o '"label"' <<<"$json" | wc -l)" = 3 ] && [ ! -e never-made ] &&
  ok "plan --json lists the offloaded groups as the text says them" || bad "plan --json, group offload: $json"
json=$("$bin" plan --json --set model_preset=dit-tiny --set model_type=lora --set lora_rank=4 2>/dev/null)
! grep -q '"group_offload"' <<<"$json" && ok "plan --json has no group offload section without it" ||
  bad "plan --json, no group offload: $json"
echo "{}" > empty.json
go_train=(--set num_threads=2 --set model_preset=flux-tiny --set model_type=lora --set lora_rank=4 --set synthetic_data=true
  --set max_train_steps=2 --set validation_steps=0 --set seed=3)
"$bin" train --config empty.json "${go_train[@]}" --set output_dir=go-a >/dev/null 2>&1
expect 0 "train with the groups in files" "trained 2 steps" -- "$bin" train --config empty.json "${go_train[@]}" \
  --set output_dir=go-b --set enable_group_offload=true --set group_offload_to_disk_path=go-files --set gradient_checkpointing=true
[ "$(ls go-files | tr '\n' ' ')" = "group_FluxTransformer2DModel_unmatched_group.safetensors group_single_transformer_blocks_0_0.safetensors group_single_transformer_blocks_1_1.safetensors group_transformer_blocks_0_0.safetensors group_transformer_blocks_1_1.safetensors " ] &&
  ok "one file a group" || bad "group files: $(ls go-files)"
cmp -s go-a/pytorch_lora_weights.safetensors go-b/pytorch_lora_weights.safetensors && ok "the adapters as trained on the device" ||
  bad "group offload changed the adapters"

finish
