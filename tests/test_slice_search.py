"""benchmarks/slice_search/slice_search.py, the offline study of the max-slicing search: its references against
directions known by construction, and the script's search at the paper's and the chosen settings on such sets."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import load_benchmark, only_run_dir, run_script

import dsdpg_msmmd_sobolev as msmmd

slice_search = load_benchmark("slice_search/slice_search")
H = 100.0


def sets_differing_along(direction: torch.Tensor, pairs: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prediction sets (2, pairs, 10, d) and target sets (pairs, 15, d) alike but for a shift of the targets by 3 along
    `direction`: the projected MMD^2 is largest on +-direction (small isotropic noise, the shift dominates)."""
    generator = torch.Generator().manual_seed(seed)
    d = direction.shape[0]
    x = 0.05 * torch.randn(2, pairs, 10, d, generator=generator)
    y = 0.05 * torch.randn(pairs, 15, d, generator=generator) + 3.0 * direction
    return x, y


def test_projected_mmd2_is_the_scripts_mmd2_of_the_projections():
    x, y = sets_differing_along(torch.tensor([0.0, 1.0, 0.0]), pairs=4)
    yb = y.expand(2, *y.shape)
    theta = F.normalize(torch.randn(2, 4, 5, 3), dim=-1)  # 5 directions per set pair
    values = slice_search.projected_mmd2(msmmd, x, yb, theta, H, "biased")
    for r in range(5):
        t = theta[..., r, :]  # (2, 4, 3)
        expected = msmmd.mmd2((x @ t[..., None]), (yb @ t[..., None]), H, "biased")
        torch.testing.assert_close(values[..., r], expected)


def test_the_grid_reference_finds_the_direction_of_the_shift_on_the_circle():
    angle = 1.1
    direction = torch.tensor([math.cos(angle), math.sin(angle)])
    x, y = sets_differing_along(direction, pairs=6)
    value, theta = slice_search.reference_grid(msmmd, x, y.expand(2, *y.shape), H, "biased", 360)
    cosine = (theta * direction).sum(-1).abs()  # theta and -theta are the same slice
    assert (cosine > math.cos(math.radians(2))).all()
    best = slice_search.projected_mmd2(msmmd, x, y.expand(2, *y.shape), direction.expand(2, 6, 1, 2), H, "biased")[
        ..., 0
    ]
    assert (value >= best * (1 - 1e-4)).all()  # at least the known maximum, to the grid's float32 rounding


def test_the_restart_reference_finds_the_direction_of_the_shift_on_the_7d_sphere():
    direction = F.normalize(torch.tensor([1.0, -2.0, 0.5, 0.0, 1.0, 0.0, 3.0]), dim=0)
    x, y = sets_differing_along(direction, pairs=3)
    value, theta, values = slice_search.reference_restarts(
        msmmd, x, y.expand(2, *y.shape), H, "biased", 8, 300, torch.Generator().manual_seed(1)
    )
    assert ((theta * direction).sum(-1).abs() > math.cos(math.radians(3))).all()
    assert values.shape == (2, 3, 8) and (value == values.max(-1).values).all()


@pytest.mark.parametrize("optimizer, lr, steps, reaches", [("adam", 1e-4, 100, False), ("adam", 0.3, 30, True)])
def test_the_scripts_search_from_a_random_start(optimizer, lr, steps, reaches):
    """On HalfCheetah's dimension: the paper's Adam at 1e-4 turns theta by < 2 deg and stays far from the maximum; Adam
    at 0.3 for 30 steps (the chosen search) reaches >= 95 % of it on every pair."""
    direction = F.normalize(torch.ones(7), dim=0)
    x, y = sets_differing_along(direction, pairs=16)
    start = torch.randn(2, 16, 7, generator=torch.Generator().manual_seed(2))
    theta = slice_search.run_search(msmmd, x, y, H, "biased", start, optimizer, lr, steps)
    yb = y.expand(2, *y.shape)
    reached = slice_search.projected_mmd2(msmmd, x, yb, theta.unsqueeze(-2), H, "biased")[..., 0]
    best = slice_search.projected_mmd2(msmmd, x, yb, direction.expand(2, 16, 1, 7), H, "biased")[..., 0]
    turned = torch.rad2deg(torch.acos((theta * F.normalize(start, dim=-1)).sum(-1).clamp(-1, 1)))
    if reaches:
        assert (reached >= 0.95 * best).all()
    else:
        assert (turned < 2.0).all() and (reached < 0.95 * best).any() and reached.mean() < 0.5 * best.mean()


@pytest.mark.slow
def test_capture_records_the_batches_and_starts_the_scripts_update_searches_from(tmp_path):
    """capture() wraps the script's critic_loss: what it records is what the resumed update passed (its replay batch's
    prediction and target sets, the search's start), and the script's own function is back in place afterwards."""
    flags = "--total-timesteps 160 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --batch-size 16"
    flags += " --eval-frequency 80 --eval-episodes 1 --num-samples 4 --noise-dim 8 --slice-steps 5"
    result = run_script("dsdpg_msmmd_sobolev.py", *flags.split(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    module, built, step, captured = slice_search.capture(str(only_run_dir(tmp_path)), 2)
    assert step == 160 and len(captured) == 2 and module.critic_loss.__module__ == module.__name__
    for predictions, targets, start in captured:  # Walker2d-v4 (the default): d = 1 + 6; K = 8 - 25 % = 6
        assert predictions.shape == (2, 16, 4, 7) and targets.shape == (16, 6, 7) and start.shape == (2, 16, 7)
        loss, theta = module.critic_loss(predictions, targets, 100.0, "biased", (0, 0.1, "adam", start))
        torch.testing.assert_close(theta, F.normalize(start, dim=-1))  # 0 steps: the search stays on its start
    assert not torch.equal(captured[0][2], captured[1][2])  # a fresh start per update
