#!/usr/bin/env python3
"""bf16 yardsticks: how far diffusers itself lands from each parity fixture's float64 reference when PyTorch runs
the same class in bf16 as SimpleTuner trains it under mixed_precision bf16 (docs/FIXTURES.md).

  bf16_yardstick.py [--out tests/fixtures] [names...]     (default: every fixture of make_fixtures.py, in order)
  bf16_yardstick.py --table [--segtrain test_parity.log] [names...]   (the table of docs/FIXTURES.md)

Per fixture it reads the committed folder and parity files (make_fixtures.py's, left unchanged) and writes
<out>/<name>/bf16_yardstick.json: per parity file, per tensor the file checks (pred, loss, every gradient), the
relative L2 error of PyTorch's bf16 result against the float64 reference (METRIC below), measured in DRAWS draws:
draw 0 on the file's own inputs against its stored reference, each other on those inputs perturbed by a fraction of
a bf16 ulp (perturbed(), seeded: a rerun gives the same bytes) against a float64 reference recomputed for them. One
draw of a tensor whose error is a cancelling sum can land several times under its own typical value; the yardstick
("errors") is the median over the draws, and "draws" keeps every one (DRAWS_NOTE).

The run, as SimpleTuner's mixed_precision bf16 full training (the fixtures hold every parameter's gradient): the
whole model cast to weight_dtype bf16 (ModelMixin.to(dtype), so no _keep_in_fp32_modules), its forward under
torch.autocast(bf16) as accelerate's prepare wraps it, the output cast to float32 (convert_outputs_to_fp32), the
loss F.mse_loss(pred.float(), target.float()); the data inputs (latents, text-encoder states, pooled vectors,
control and condition latents) in bf16 as SimpleTuner casts them to weight_dtype, the time, guidance, ids and
masks in float32. Each class runs as diffusers ships it: none of make_fixtures.py's @exact float64 changes.
On the CPU: autocast's CPU op lists, one thread.

Needs the reference venv (scripts/reference-venv.sh); `make test` only reads the files.
"""
import argparse
import json
import os
import pickle
import re
import statistics
import sys
import traceback

import torch
import diffusers
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf   # noqa: E402

mf.EXACT = False   # before any class is touched: the classes as diffusers ships them

METRIC = ("relative L2: ||bf16 - reference|| / ||reference||, over the whole tensor (the loss: |bf16 - reference| / "
          "|reference|); ||bf16|| where the reference is exactly zero. As tests/test_parity.c's rel_l2. loss_bound: "
          "2 rho + rho^2, rho = ||pred - reference pred|| / ||reference pred - target||, the largest relative loss "
          "error that pred's error can give, the loss's bar (its measured error is one draw, small by chance)")
PRECISION = ("SimpleTuner mixed_precision bf16, full training: model.to(bfloat16) (every parameter, gradients bf16), "
             "forward under torch.autocast(cpu, bfloat16), output .float(), loss F.mse_loss in float32; latents, "
             "text-encoder states, pooled vectors and condition latents given in bf16, time, guidance, ids and masks "
             "in float32; each class as diffusers ships it; CPU, 1 thread")
DRAWS = 8
PERTURBATION = 2.0 ** -9   # relative: a quarter to a half of a bf16 ulp (2^-8 to 2^-7 of the value)
DRAWS_NOTE = ("errors: per tensor the median of its %d draws' errors (the yardstick); draws: every draw's, draw 0 on "
              "the parity file's own inputs against its stored reference, draws 1-%d on those inputs with each data "
              "input (DATA_INPUTS but ids, which hold integers) and the target multiplied element-wise by 1 + %g u, "
              "u uniform in [-1, 1] (a quarter to a half of a bf16 ulp), rounded to float32, against a float64 "
              "reference recomputed as make_fixtures.py's for them; loss_bound: the median of loss_bounds, each "
              "draw's" % (DRAWS, DRAWS - 1, PERTURBATION))
# the inputs SimpleTuner casts to weight_dtype; the rest (sigma, guidance, ids, masks, time_ids) stay float32
DATA_INPUTS = {"latents", "encoder_hidden_states", "encoder_hidden_states_2", "audio_encoder_hidden_states",
               "pooled_projections", "text_embeds", "llama_hidden_states", "qwen_hidden_states",
               "control_hidden_states", "condition_latents", "cond_latents", "pose_hidden_states", "face_pixel_values",
               "encoder_hidden_states_image", "image_embeds", "context_latents"}


def rel_l2(got, want):
    got, want = got.to(torch.float64), want.to(torch.float64)
    d, w = (got - want).norm().item(), want.norm().item()
    return d / w if w > 0 else got.norm().item()


def loss_bound(pred, ref_pred, target):
    """The largest relative loss error a prediction this far from the reference can give: with r = reference pred -
    target and d = pred - reference pred, loss - reference loss = (2 <r, d> + |d|^2) / N, at most 2 rho + rho^2 of
    |r|^2 / N for rho = |d| / |r|. The measured loss error is one draw of <r, d>, as small as 1e-5 by chance where
    the prediction's error is 1e-2: no bar for another engine's."""
    want = ref_pred.to(torch.float64)
    rho = (pred.to(torch.float64) - want).norm().item() / (want - target.to(torch.float64)).norm().item()
    return 2 * rho + rho * rho


def references(stored):
    """The file's checked tensors: pred, loss and every gradient as grad.<name> (a factored one multiplied out)."""
    ref = {"pred": stored["pred"], "loss": stored["loss"]}
    for k, v in stored.items():
        if k.startswith("grad."):
            ref[k] = v
        elif k.startswith("grad_dy."):
            n = k[len("grad_dy."):]
            ref["grad." + n] = v.to(torch.float64).T @ stored["grad_x." + n].to(torch.float64)
    return ref


def bf16_step(model, run, t):
    """pred, loss and every parameter's gradient of one bf16 training step (PRECISION), in float64."""
    model = model.to(torch.bfloat16).train()
    model.zero_grad(set_to_none=True)
    hook = model.register_forward_pre_hook(mf.float32_args, with_kwargs=True)
    inputs = {k: v.to(torch.bfloat16 if k in DATA_INPUTS else torch.float32) for k, v in t.items()}
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = run(model, inputs).float()
    finally:
        hook.remove()
    loss = torch.nn.functional.mse_loss(pred, inputs["target"].float())
    loss.backward()
    got = {"pred": pred.detach(), "loss": loss.detach().reshape(1)}
    for n, p in model.named_parameters():
        got["grad." + n] = p.grad.detach() if p.grad is not None else torch.zeros_like(p)
    return got


def perturbed(t, gen):
    """Another draw's inputs: each data input (but ids: a tensor of integers) and the target times 1 + PERTURBATION u,
    u uniform in [-1, 1] per element, rounded to float32 as a parity file's inputs are. Enough to move bf16's
    rounding of a share of the inputs, and with them every rounding after; the float64 reference is recomputed for
    them, so the draw measures the same error, on inputs as legitimate as the file's."""
    out = dict(t)
    for k in sorted(t):
        v = t[k]
        if (k in DATA_INPUTS or k == "target") and not torch.equal(v, v.round()):
            u = torch.rand(v.shape, generator=gen, dtype=torch.float64) * 2 - 1
            out[k] = mf.rounded(v * (1 + PERTURBATION * u))
    return out


def draws_of(name, fname, t):
    """The DRAWS inputs of a parity file: its own, then DRAWS - 1 perturbed, seeded by fixture and file."""
    gen = torch.Generator().manual_seed(mf.seed_of(name + "/" + fname))
    return [t] + [perturbed(t, gen) for _ in range(DRAWS - 1)]


def float64_references(name, out, draws):
    """pred, loss and every gradient in float64 per draw's inputs, as make_fixtures.py computes a parity file's (its
    @exact changes on). In a forked child: those changes patch the classes for good, and the bf16 runs take each
    class as diffusers ships it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            mf.EXACT = True
            fx = mf.FIXTURES[name]
            model, refs = mf.load_folder(name, out).to(torch.float64), []
            for t in draws:
                pred, loss, grads, _ = mf.reference(model, fx["run"], t, fx["zero"])
                refs.append(dict({"grad." + n: g for n, g in grads.items()}, pred=pred, loss=loss.reshape(1)))
            with os.fdopen(w, "wb") as f:
                pickle.dump(refs, f)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    if os.waitpid(pid, 0)[1] or not data:
        raise SystemExit("%s: the float64 references of its draws failed" % name)
    return pickle.loads(data)


def measure(name, fname, out):
    """One parity file's yardstick: per checked tensor its errors in every draw, and each draw's loss bound."""
    fx = mf.FIXTURES[name]
    stored = load_file(os.path.join(out, name, fname))
    ref = references(stored)
    draws = draws_of(name, fname, mf.stored_inputs(stored))
    refs = float64_references(name, out, draws)
    # draw 0 against the file itself: the recomputed reference must be the stored one (the @exact changes applied)
    if rel_l2(refs[0]["pred"], stored["pred"]) > 1e-6:
        raise SystemExit("%s: %s's float64 reference, recomputed, is %.2g from the stored pred" % (
            name, fname, rel_l2(refs[0]["pred"], stored["pred"])))
    refs[0] = ref
    model = mf.load_folder(name, out)
    errors, bounds = {k: [] for k in ref}, []
    for t, want in zip(draws, refs):
        got = bf16_step(model, fx["run"], t)
        missing = sorted(set(ref) - set(got) or set(ref) - set(want))
        if missing:
            raise SystemExit("%s: %s checks %s, which a run has not" % (name, fname, ", ".join(missing[:3])))
        for k in ref:
            errors[k].append(rel_l2(got[k], want[k]))
        bounds.append(loss_bound(got["pred"], want["pred"], t["target"]))
    g3 = lambda x: float("%.3g" % x)   # noqa: E731
    # the file's own float32 loss: a test tells a yardstick left from an older fixture by it
    return {"reference_loss": stored["loss"].item(), "loss_bound": g3(statistics.median(bounds)),
            "loss_bounds": [g3(b) for b in bounds], "errors": {k: g3(statistics.median(e)) for k, e in errors.items()},
            "draws": {k: [g3(x) for x in e] for k, e in errors.items()}}


def yardstick(name, out):
    fx = mf.FIXTURES[name]
    files = {}
    for fname, size in mf.parity_files(fx):
        mf.use_size(*size)
        files[fname[:-len(".safetensors")]] = measure(name, fname, out)
    mf.use_size(mf.SQUARE_B, mf.H_SQUARE, mf.W_SQUARE)
    write_yardstick(name, out, fx["cls"], DRAWS_NOTE, files)


def write_yardstick(name, out, class_name, draws_note, files):
    """<out>/<name>/bf16_yardstick.json, and a line per file"""
    doc = dict(mf.versions(), fixture=name, class_name=class_name, metric=METRIC, precision=PRECISION,
               draws=draws_note, files=files)
    text = json.dumps(doc, indent=1, sort_keys=True)
    text = re.sub(r"\[\s+([^][]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)  # one line
    with open(os.path.join(out, name, "bf16_yardstick.json"), "w") as f:
        f.write(text + "\n")
    for k, v in files.items():
        e, d = v["errors"], v["draws"]
        worst = max((g for g in e if g.startswith("grad.")), key=e.get)
        print("%-16s %-9s pred %.2g  loss %.2g  worst gradient %.2g (%s; draws %.2g-%.2g)" % (
            name, k, e["pred"], e["loss"], e[worst], worst, min(d[worst]), max(d[worst])), flush=True)


# ------------------------------------------------------------------ HeartMuLa (a token model: make_fixtures.py's EXTRA)
HEARTMULA_NOTE = ("HeartMuLa is a token model (SimpleTuner's own HeartMuLaModel, make_fixtures.py's EXTRA writer): "
                  "its inputs are integer tokens and masks, which no draw can perturb, so one draw, the file's own; "
                  "pred is its logits, codebook0_logits and codebook_logits as one tensor (their relative L2 together), "
                  "the loss SimpleTuner's _autoregressive_token_loss (make_fixtures.heartmula_loss) on the float32 "
                  "logits; loss_bound: twice each loss row's largest logit error, weighted as the loss weighs the "
                  "rows, over |reference loss| (cross-entropy moves by at most twice its row's largest logit change)")


def heartmula_model(folder, meta):
    """SimpleTuner's HeartMuLaModel with the fixture's flavours and weights (float32, as the folder holds them)."""
    cls = mf.simpletuner_class("heartmula.modeling_heartmula.HeartMuLaModel")
    sys.modules[cls.__module__]._LLAMA_FLAVORS.update(json.loads(meta["flavors"]))
    from simpletuner.helpers.models.heartmula.configuration_heartmula import HeartMuLaConfig
    model = cls(HeartMuLaConfig(**json.loads(meta["kwargs"]))).to(torch.float32)
    missing, unexpected = model.load_state_dict(load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors")),
                                                strict=False)
    if unexpected or any(not re.match(r"(backbone|decoder)\.embed_tokens\.", k) for k in missing):
        raise SystemExit("heartmula: the folder's weights do not fit the class (missing %s, unexpected %s)" % (
            missing[:3], unexpected[:3]))
    return model


def heartmula_measure(model, stored):
    """One bf16 step of HeartMuLa as SimpleTuner trains it (PRECISION) against the file's float64 reference."""
    tokens, mask = stored["tokens"].long(), stored["tokens_mask"].bool()
    frames = stored["audio_frame_mask"].bool()
    model = model.to(torch.bfloat16).train()
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o = model(tokens=tokens, tokens_mask=mask, attention_mask=mask.any(dim=-1).to(torch.long))
    c0, rest = o["codebook0_logits"].float(), o["codebook_logits"].float()
    loss = mf.heartmula_loss(tokens, frames, c0, rest)
    loss.backward()
    ref_c0, ref_rest = stored["codebook0_logits"], stored["codebook_logits"]
    errors = {"pred": rel_l2(torch.cat([c0.flatten(), rest.flatten()]), torch.cat([ref_c0.flatten(),
                                                                                     ref_rest.flatten()])),
              "loss": rel_l2(loss.detach().reshape(1), stored["loss"])}
    grads = dict(model.named_parameters())
    for k in stored:
        if k.startswith("grad."):
            g = grads[k[len("grad."):]].grad
            errors[k] = rel_l2(g if g is not None else torch.zeros_like(stored[k]), stored[k])
    fm = frames[:, 1:].to(torch.float64)
    denom = fm.sum().clamp_min(1)
    d0 = (c0.double() - ref_c0.double()).abs().amax(-1)
    dr = (rest.double() - ref_rest.double()).abs().amax(-1)
    bound = 2 * ((d0 * fm).sum() / denom + (dr * fm.unsqueeze(-1)).sum() / (denom * dr.shape[-1]))
    return errors, bound.item() / abs(stored["loss"].item())


def heartmula_yardstick(name, out):
    folder = os.path.join(out, name)
    with safe_open(os.path.join(folder, "parity.safetensors"), "pt") as f:
        meta = f.metadata()
    stored = load_file(os.path.join(folder, "parity.safetensors"))
    errors, bound = heartmula_measure(heartmula_model(folder, meta), stored)
    g3 = lambda x: float("%.3g" % x)   # noqa: E731
    files = {"parity": {"reference_loss": stored["loss"].item(), "loss_bound": g3(bound), "loss_bounds": [g3(bound)],
                        "errors": {k: g3(e) for k, e in errors.items()},
                        "draws": {k: [g3(e)] for k, e in errors.items()}}}
    write_yardstick(name, out, meta["class_name"], HEARTMULA_NOTE, files)


# written apart from make_fixtures.py's FIXTURES table, as make_fixtures.py writes them (its EXTRA)
EXTRA = {"heartmula": heartmula_yardstick}


def segtrain_errors(log):
    """{(fixture, file): (pred, loss, worst gradient ratio, its parameter, gradients over PyTorch's largest draw, of how
    many)} from test_parity's "bf16-train" lines: segtrain's full training under mixed_precision bf16, the ratio its
    gradient error over PyTorch's."""
    got = {}
    for line in open(log):
        w = line.split()
        if w and w[0] == "bf16-train":
            got[(w[1], w[2].rstrip(":"))] = (float(w[4]), float(w[6]), float(w[8]), w[9].rstrip(","), w[10], w[12])
    return got


def table(out, names, log):
    """docs/FIXTURES.md's table: per fixture and file PyTorch's bf16 errors (pred, loss, the gradients' median and
    worst, with the worst's draws) and, from a test_parity log, segtrain's bf16 training's (pred, loss, its worst
    gradient error over PyTorch's on the same tensor, how many gradients it has over PyTorch's largest draw)."""
    seg = segtrain_errors(log) if log else {}
    print("| fixture | file | pred | loss (bound) | gradients: median | worst (draws; parameter) | segtrain pred "
          "| segtrain loss | segtrain / PyTorch, worst gradient (parameter) | over the largest draw |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        with open(os.path.join(out, name, "bf16_yardstick.json")) as f:
            files = json.load(f)["files"]
        for file, v in files.items():
            e = v["errors"]
            grads = sorted((e[k], k[len("grad."):]) for k in e if k.startswith("grad."))
            d = v["draws"]["grad." + grads[-1][1]]
            s = seg.get((name, file))
            print("| %s | %s | %.2g | %.2g (%.2g) | %.2g | %.2g (%.2g-%.2g; `%s`) | %s | %s | %s | %s |" % (
                name, file, e["pred"], e["loss"], v["loss_bound"], grads[len(grads) // 2][0], grads[-1][0], min(d),
                max(d), grads[-1][1], "%.2g" % s[0] if s else "", "%.2g" % s[1] if s else "",
                "%.2g (`%s`)" % (s[2], s[3]) if s else "", "%s of %s" % (s[4], s[5]) if s else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures"))
    ap.add_argument("--table", action="store_true", help="print docs/FIXTURES.md's table of the written yardsticks; "
                    "run nothing")
    ap.add_argument("--segtrain", metavar="LOG", help="with --table: test_parity's output, for segtrain's columns")
    ap.add_argument("--simpletuner", metavar="PATH", help="a SimpleTuner checkout at commit %s (the fixtures of "
                    "its own classes)" % mf.SIMPLETUNER_COMMIT)
    ap.add_argument("names", nargs="*", help="fixtures (default all): " + ", ".join(list(mf.FIXTURES) + list(EXTRA)))
    a = ap.parse_args()
    mf.SIMPLETUNER["root"] = a.simpletuner and os.path.abspath(a.simpletuner)
    every = list(mf.FIXTURES) + list(EXTRA)
    for n in a.names:
        if n not in every:
            sys.exit("bf16_yardstick.py: unknown fixture '%s' (valid: %s)" % (n, ", ".join(every)))
    if a.table:
        return table(a.out, a.names or every, a.segtrain)
    diffusers.utils.logging.set_verbosity_error()
    torch.set_num_threads(1)   # one summation order: the same numbers on every run
    torch.use_deterministic_algorithms(True)
    for n in a.names or every:
        (EXTRA[n] if n in EXTRA else yardstick)(n, a.out)


if __name__ == "__main__":
    main()
