"""How a Sobolev critic's training step divides between the return and its action-gradient, from a run's checkpoint.

MAGE's and DSDPG's critics fit joint targets (y, dy/da): MAGE with a Huber TD term plus 5 x a Huber term on the
action-gradient, DSDPG with one MMD (or max-sliced MMD) between sets of (1+A)-dimensional points. Both train with
RAdam, whose step is normalised by the gradient's running scale: if the action-gradient coordinates supply most of the
gradient, the return's share of each step, and so the speed at which values propagate, shrinks. This tool measures
that split at a checkpoint. It resumes the run's own script from a copy of the checkpoint (the same networks, replay
buffer and RNG states; the run folder is left untouched), stops it before its loop, and runs its critic update on
`--batches` fresh replay batches with the optimiser's step disabled, so every batch sees the checkpoint's critic.
Inside the script's own `critic_loss` it takes the loss's gradient w.r.t. the prediction points and splits it into
the return coordinate and the action-gradient coordinates, each backpropagated to the critic's weights:
  * value_share = |g_return| / (|g_return| + |g_action_grad|), the parameter-gradient norms of the two parts (their
    sum is the update's whole gradient, whose norm is grad_norm_total);
  * cosine(g_return, g_action_grad): whether the two parts push the weights the same way (> 0) or against each other;
  * the errors the loss sees per pair: |mean prediction - mean target| of the return and of dQ/da (norm over actions),
    and the targets' mean |y| and |dy/da|.
Printed as medians over the batches (quartiles in brackets); --out writes every batch's numbers as JSON.

Usage (a checkpoint.pt of mage_huber_sobolev, dsdpg_mmd_sobolev or dsdpg_msmmd_sobolev, or its run folder):
    python benchmarks/sobolev_split.py benchmarks/mujoco_cpu/grid/.../runs/<run>/ --batches 20 --out split.json
"""

import contextlib
import importlib
import inspect
import io
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import torch
import tyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from writable import out_error  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOBOLEV_SCRIPTS = ("mage_huber_sobolev", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev")


@dataclass
class Args:
    checkpoint: tyro.conf.Positional[str]
    """checkpoint.pt of a Sobolev run (MAGE, DSDPG-MMD, DSDPG-MSMMD), or its run folder"""
    batches: int = 20
    """replay batches measured (each of the run's --batch-size)"""
    out: str | None = None
    """also write every batch's numbers and the summary as JSON here"""


class Built(Exception):
    """Raised by the patched Run.start: the script's main() has restored its checkpoint and stops before its loop."""

    def __init__(self, built: dict):
        self.built = built


def fail(message: str) -> NoReturn:
    raise SystemExit(f"sobolev_split.py: error: {message}")


def resume_until_loop(path: str) -> tuple:
    """The script's module and main()'s variables once it has resumed from a copy of the checkpoint at `path`."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    run_bookkeeping = importlib.import_module("run_bookkeeping")
    path = run_bookkeeping.file_in_run(path, "checkpoint.pt")
    if not os.path.isfile(path):
        fail(f"no checkpoint at {path!r}")
    try:  # only to learn the script: the resumed script checks the checkpoint itself (damaged, non-finite, ...)
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        fail(f"cannot read {path!r} ({type(error).__name__})")
    name = saved.get("script", "").removesuffix(".py") if isinstance(saved, dict) else ""
    if name not in SOBOLEV_SCRIPTS:
        fail(f"{path!r} is not a checkpoint of a Sobolev script ({', '.join(SOBOLEV_SCRIPTS)})")
    module = importlib.import_module(name)
    original_start = run_bookkeeping.Run.start

    def start(run, stateful: dict, device: torch.device) -> int:
        original_start(run, stateful, device)
        run.writer.close()
        raise Built(dict(inspect.currentframe().f_back.f_locals))

    run_bookkeeping.Run.start = start
    with tempfile.TemporaryDirectory() as folder:  # the resumed run writes its TensorBoard file here, not in the run
        copy = os.path.join(folder, "run", "checkpoint.pt")
        os.makedirs(os.path.dirname(copy))
        shutil.copy(path, copy)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                module.main(tyro.cli(module.Args, args=["--resume", copy, "--no-compile", "--no-cudagraphs"]))
        except Built as stop:
            return module, stop.built, saved["global_step"]
        finally:
            run_bookkeeping.Run.start = original_start
    fail("the script did not reach its loop")


def measure(module, built: dict, batches: int) -> list[dict]:
    """Run the critic update `batches` times, its optimiser step disabled, splitting each loss inside critic_loss."""
    critic, rows = built["critic"], []
    params = [p for p in critic.parameters() if p.requires_grad]
    original_loss = module.critic_loss

    def critic_loss(predictions: torch.Tensor, targets: torch.Tensor, *rest, **options):
        result = original_loss(predictions, targets, *rest, **options)
        loss = result[0] if isinstance(result, tuple) else result
        (d_predictions,) = torch.autograd.grad(loss, predictions, retain_graph=True)
        value_part, grad_part = d_predictions.clone(), d_predictions.clone()
        value_part[..., 1:], grad_part[..., 0] = 0.0, 0.0
        parts = []
        for part in (value_part, grad_part):
            grads = torch.autograd.grad(predictions, params, part, retain_graph=True)
            parts.append(torch.cat([g.flatten() for g in grads]))
        g_value, g_grad = parts
        act_dim = built["act_dim"]
        mean_prediction = predictions.detach().reshape(*predictions.shape[:2], -1, predictions.shape[-1]).mean(2)
        mean_target = targets.detach().reshape(targets.shape[0], -1, targets.shape[-1]).mean(1)  # (B, 1+A)
        error = mean_prediction - mean_target  # (E, B, 1+A)
        rows.append(
            dict(
                value_share=(g_value.norm() / (g_value.norm() + g_grad.norm())).item(),
                cosine=torch.nn.functional.cosine_similarity(g_value, g_grad, dim=0).item(),
                grad_norm_return=g_value.norm().item(),
                grad_norm_action_grad=g_grad.norm().item(),
                grad_norm_total=(g_value + g_grad).norm().item(),
                return_error=error[..., 0].abs().mean().item(),
                action_grad_error=error[..., 1 : 1 + act_dim].norm(dim=-1).mean().item(),
                target_return=mean_target[..., 0].abs().mean().item(),
                target_action_grad=mean_target[..., 1 : 1 + act_dim].norm(dim=-1).mean().item(),
            )
        )
        return result

    module.critic_loss = critic_loss
    built["critic_optimizer"].step = lambda *a, **k: None  # every batch sees the checkpoint's critic
    try:
        for _ in range(batches):
            built["update_critic"]()
    finally:
        module.critic_loss = original_loss
    return rows


def main(args: Args) -> None:
    if args.batches < 1:
        fail("--batches must be >= 1")
    if message := out_error(args.out):
        fail(message)
    module, built, step = resume_until_loop(args.checkpoint)
    rows = measure(module, built, args.batches)
    summary = {}
    for key in rows[0]:
        values = np.array([row[key] for row in rows])
        summary[key] = [float(np.median(values)), *map(float, np.percentile(values, [25, 75]))]
    print(f"{module.__name__} at step {step}, {args.batches} replay batches (median [quartiles]):")
    for key, (median, low, high) in summary.items():
        print(f"  {key:22s} {median:10.4g}  [{low:.4g}, {high:.4g}]")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "checkpoint": args.checkpoint,
                    "script": module.__name__,
                    "step": step,
                    "summary": summary,
                    "batches": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
