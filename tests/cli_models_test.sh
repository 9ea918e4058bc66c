#!/usr/bin/env bash
# A diffusers folder's config.json and the weights path as `plan` and the other commands meet them: every bad field
# of every family's reader is one line naming it and exit 1 (no signal, no hang), a config.json that disagrees with
# itself is refused, and a missing folder or a hub name is an error in every command.
# Usage: cli_models_test.sh path/to/segtrain path/to/source
bin=$1 src=$2
EXPECT_TIMEOUT=20
. "$src/tests/clikit.sh"
export OMP_WAIT_POLICY=passive
fix=$src/tests/fixtures

# folder PRESET FIXTURE KEY VALUE: a copy of the fixture's config.json with KEY set to VALUE (JSON), in ./f
folder() {
  rm -rf f && mkdir f
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open("f/config.json", "w"))' \
    "$fix/$2/config.json" "$3" "$4"
  echo "{\"model_preset\": \"$1\", \"pretrained_model_name_or_path\": \"$tmp/f\", \"resolution\": 64}" > f.json
}

# Every family whose reader divides by its heads or walks its layers: 0, negative, huge and fractional values of
# the keys it reads are one line naming the key (exit 1); a signal is 128 and more, a hang 124.
for row in flux-tiny:flux-dev chroma-tiny:chroma flux2-tiny:flux2 hidream-tiny:hidream \
  hunyuanvideo15-tiny:hunyuanvideo15 longcat-image-tiny:longcat-image qwen-image-tiny:qwen-image; do
  preset=${row%%:*} fixture=${row#*:}
  for key in num_attention_heads attention_head_dim num_layers in_channels; do
    for v in 0 -2 1e12 2.5; do
      folder "$preset" "$fixture" "$key" "$v"
      expect 1 "$fixture: $key $v is refused by name" "$key" -- "$bin" plan --config f.json
    done
  done
  folder "$preset" "$fixture" attention_head_dim 24 # a head width that the file's (or the class's) axes do not fill
  expect 1 "$fixture: 24-wide heads that the rotary axes do not fill are refused" "axes|head width" -- \
    "$bin" plan --config f.json
done
# Values that do not divide as the class packs them: Flux's, Flux.2's and LongCat's in_channels hold 2 x 2 patches
# (4 C), Qwen-Image's out_channels x patch_size^2, HunyuanVideo 1.5's the latent's and the condition's
for row in flux-tiny:flux-dev:18:"in_channels 18" flux2-tiny:flux2:130:"in_channels 130" \
  longcat-image-tiny:longcat-image:66:"in_channels 66" qwen-image-tiny:qwen-image:66:"in_channels 66" \
  hunyuanvideo15-tiny:hunyuanvideo15:3:"in_channels 3 below out_channels"; do
  IFS=: read -r preset fixture v said <<<"$row"
  folder "$preset" "$fixture" in_channels "$v"
  expect 1 "$fixture: in_channels $v is refused by name" "$said" -- "$bin" plan --config f.json
done
# A U-Net's counts are checked before its blocks are walked: plan finishes at once
for v in 0 9 1000000000; do
  folder sd1x-tiny sd1x layers_per_block "$v"
  expect 1 "sd1x: layers_per_block $v is refused by name, at once" "layers_per_block is $v" -- \
    "$bin" plan --config f.json
done
folder sd1x-tiny sd1x transformer_layers_per_block 1000000
expect 1 "sd1x: transformer_layers_per_block 10^6 is refused by name, at once" "transformer_layers_per_block" -- \
  "$bin" plan --config f.json
folder stable-cascade-tiny stable-cascade down_num_layers_per_block "[1000000, 1000000]"
expect 1 "stable_cascade: down_num_layers_per_block 10^6 is refused by name, at once" "down_num_layers_per_block" -- \
  "$bin" plan --config f.json
# A config.json whose flags are not booleans is refused, not read as the class's default
folder flux-tiny flux-dev guidance_embeds '"yes"'
expect 1 "flux: guidance_embeds \"yes\" is refused by name" "guidance_embeds is not true or false" -- \
  "$bin" plan --config f.json

# A Flux folder's rotary axes must fill its heads: a wrong axes_dims_rope is refused, not replaced by computed ones
folder flux-tiny flux-dev axes_dims_rope "[4, 6, 8]"
expect 1 "flux: axes_dims_rope (4, 6, 8) over 16-wide heads is refused by name" \
  "axes_dims_rope: \\(4, 6, 8\\) must be even widths that add up to the head width 16" -- "$bin" plan --config f.json
folder flux2-tiny flux2 axes_dims_rope "[4, 4, 4, 2]"
expect 1 "flux2: axes_dims_rope that do not fill the heads are refused by name" "axes_dims_rope: \\(4, 4, 4, 2\\)" -- \
  "$bin" plan --config f.json
folder flux-tiny flux-dev axes_dims_rope "[4, 6, 6]"
expect 0 "flux: the fixture's own axes plan" "model flux-tiny \\(flux\\): 2 double-stream" -- "$bin" plan --config f.json
expect 0 "flux: a num_heads key over the folder takes axes that fill the new heads" "width 32, 4 heads" -- \
  "$bin" plan --config f.json --set num_heads=4

# The weights path, one rule in every command: a path that is not there, or a hub name, is refused by name (a
# misspelled Flux folder is not planned as the 12B preset)
echo '{"model_preset": "dit-tiny"}' > tiny.json
"$bin" init --config tiny.json --out w.safetensors >/dev/null || bad "init of the sample's weights"
for weights in "$tmp/flux-dve" black-forest-labs/FLUX.1-dev; do
  for c in plan train "sweep --out sw" "advise --device-memory 1GiB" "sample --weights w.safetensors --out s.png" \
    profile "init --out i.safetensors"; do
    # shellcheck disable=SC2086 # the command's own flags
    expect 1 "$c: pretrained_model_name_or_path $weights is refused by name" \
      "^segtrain ${c%% *}: pretrained_model_name_or_path: \"$weights\":? (No such file|is a Hugging Face hub name)" -- \
      "$bin" $c --config tiny.json --set pretrained_model_name_or_path="$weights"
  done
done
[ ! -e sw ] && [ ! -e s.png ] && [ ! -e i.safetensors ] && ok "refused weights leave no output" ||
  bad "refused weights left: $(ls)"
echo '{"model_family": "flux"}' > flux.json
expect 1 "flux: a misspelled folder is refused, not planned as flux-dev" 'pretrained_model_name_or_path: ".*flux-dve"' -- \
  "$bin" plan --config flux.json --set pretrained_model_name_or_path="$tmp/flux-dve"

# plan says what train refuses at once, in train's words; for a Flux folder with both in_channels, its file's and the
# model's (16 in config.json: 2 x 2 packed patches of 4 latent channels)
echo "{\"model_family\": \"flux\", \"pretrained_model_name_or_path\": \"$fix/flux-dev\", \"resolution\": 64}" > fd.json
why="in_channels 4, vae_scale_factor 8 \\(.*flux-dev's config.json: in_channels 16, the pipeline's 2 x 2 packed patches of 4 latent channels\\): segtrain has no VAE"
expect 1 "train: a Flux folder without a cache names both in_channels" "^segtrain train: $why" -- \
  "$bin" train --config fd.json --set output_dir=fd-out
expect 0 "plan: the same refusal is said as a warning, and the plan made" "^segtrain: warning: train refuses this config as it is: $why" -- \
  "$bin" plan --config fd.json
expect 0 "plan: an image family at in_channels 4 without a VAE: train's refusal" \
  "warning: train refuses this config as it is: in_channels 4, vae_scale_factor 8: segtrain has no VAE" -- \
  "$bin" plan --config tiny.json --set in_channels=4 --set vae_scale_factor=8
out=$("$bin" plan --config tiny.json --set in_channels=3 --set vae_scale_factor=1 2>&1)
! grep -q "train refuses" <<<"$out" && ok "plan: nothing said of a config train takes" || bad "plan warned: $out"
out=$("$bin" plan --config fd.json --set synthetic_data=true 2>&1)
! grep -q "train refuses" <<<"$out" && ok "plan: nothing said on synthetic data" || bad "plan warned: $out"

finish
