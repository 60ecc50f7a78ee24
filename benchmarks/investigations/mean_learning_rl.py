"""RL check of issue 14, item 2: `dsdpg_msmmd_sobolev.py` with one change patched in from outside (the script is not
edited), then its own `main`.

Patches (--patch, before the script's flags):
    gscale<f>   the critic loss sees the action-gradient coordinates of predictions and targets multiplied by f
                (f = 0.1: the return coordinate dominates the multiquadric kernel's distances); the slicing direction is
                searched in the scaled coordinates. `losses/slice_gain` is then logged on the unscaled points (off).
    zero_init   the critics' output layer starts at weight 0.01 x its default and bias 0: Z(s, a, xi) ~ 0 at the start
                instead of the initial offset of a freshly initialised network (about -0.1 on the point mass, seed 1)
    diagnose    the script unchanged, and every 100 critic updates one line of diagnostics.jsonl in the working
                directory:
                the batch means of critic 1's predicted return, of the (truncated) target returns and of the target
                returns before truncation, the mean spread (std over samples) of predictions and targets, and the
                predictions at the batch's bonus rows (all targets >= 9.99)
    diagnose_td3  the same lines (means only) for `td3_huber.py`, which it runs instead of DSDPG
    none        the script unchanged

Usage (the README's toy-grid flags):
    OMP_NUM_THREADS=1 python benchmarks/investigations/mean_learning_rl.py --patch gscale0.1 -- \\
        --env-id PointMass-v0 --truncation 5 --total-timesteps 8000 --learning-starts 1000 --hidden-dim 64 \\
        --wm-hidden-dim 64 --batch-size 64 --updates-per-step 1 --learning-rate 1e-3 --wm-learning-rate 1e-3 \\
        --eval-frequency 1000 --eval-episodes 20
The run's --exp-name becomes dsdpg_msmmd_sobolev_<patch> unless given.
"""

import json
import os
import sys

import torch
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import dsdpg_msmmd_sobolev as script  # noqa: E402
import td3_huber  # noqa: E402


def patch_gradient_scale(factor: float) -> None:
    original = script.critic_loss

    def critic_loss(predictions, targets, h, estimator, slicing):
        scale = predictions.new_full((predictions.shape[-1],), factor)
        scale[0] = 1.0
        return original(predictions * scale, targets * scale, h, estimator, slicing)

    script.critic_loss = critic_loss


def patch_zero_init() -> None:
    class Critic(script.Critic):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with torch.no_grad():
                self.fc3.weight.mul_(0.01)
                self.fc3.bias.zero_()

    script.Critic = Critic


def patch_diagnose() -> None:
    original_loss, original_truncate = script.critic_loss, script.truncate_top
    state = {"calls": 0, "before": None}
    log = open("diagnostics.jsonl", "w")

    def truncate_top(samples, p):
        state["before"] = samples[..., 0].mean().item()
        return original_truncate(samples, p)

    def critic_loss(predictions, targets, *rest):
        if state["calls"] % 100 == 0:
            z, y = predictions[0, ..., 0].detach(), targets[..., 0]  # (B, N), (B, K)
            bonus = (y >= 9.99).all(-1)
            log.write(
                json.dumps(
                    {
                        "update": state["calls"],
                        "pred_mean": z.mean().item(),
                        "target_mean": y.mean().item(),
                        "target_mean_before_truncation": state["before"],
                        "pred_spread": z.std(-1).mean().item(),
                        "target_spread": y.std(-1).mean().item(),
                        "bonus_rows": int(bonus.sum()),
                        "bonus_pred_mean": z[bonus].mean().item() if bonus.any() else None,
                        "bonus_pred_spread": z[bonus].std(-1).mean().item() if bonus.any() else None,
                        "pred_grad_norm": predictions[0, ..., 1:].detach().norm(dim=-1).mean().item(),
                        "target_grad_norm": targets[..., 1:].norm(dim=-1).mean().item(),
                        "bonus_target_grad_norm": targets[bonus][..., 1:].norm(dim=-1).mean().item()
                        if bonus.any()
                        else None,
                    }
                )
                + "\n"
            )
            log.flush()
        state["calls"] += 1
        return original_loss(predictions, targets, *rest)

    script.truncate_top, script.critic_loss = truncate_top, critic_loss


def patch_diagnose_td3() -> None:
    original_loss = td3_huber.critic_loss
    state = {"calls": 0}
    log = open("diagnostics.jsonl", "w")

    def critic_loss(predictions, targets):  # (E, B), (B,)
        if state["calls"] % 100 == 0:
            q, bonus = predictions[0].detach(), targets >= 9.99
            log.write(
                json.dumps(
                    {
                        "update": state["calls"],
                        "pred_mean": q.mean().item(),
                        "target_mean": targets.mean().item(),
                        "bonus_rows": int(bonus.sum()),
                        "bonus_pred_mean": q[bonus].mean().item() if bonus.any() else None,
                    }
                )
                + "\n"
            )
            log.flush()
        state["calls"] += 1
        return original_loss(predictions, targets)

    td3_huber.critic_loss = critic_loss


def main() -> None:
    argv = sys.argv[1:]
    if len(argv) < 2 or argv[0] != "--patch" or (len(argv) > 2 and argv[2] != "--"):
        raise SystemExit(__doc__)
    patch, flags = argv[1], argv[3:]
    if patch.startswith("gscale"):
        patch_gradient_scale(float(patch[len("gscale") :]))
    elif patch == "zero_init":
        patch_zero_init()
    elif patch == "diagnose":
        patch_diagnose()
    elif patch == "diagnose_td3":
        patch_diagnose_td3()
        args = tyro.cli(td3_huber.Args, args=flags)
        return td3_huber.main(args)
    elif patch != "none":
        raise SystemExit(f"unknown patch {patch!r}\n{__doc__}")
    args = tyro.cli(script.Args, args=flags)
    if "--exp-name" not in flags:
        args.exp_name = f"dsdpg_msmmd_sobolev_{patch}"
    script.main(args)


if __name__ == "__main__":
    main()
