"""benchmarks/sobolev_split.py: the return and action-gradient parts of a Sobolev critic's gradient add up to the
gradient the script's own update takes, each part lands on its own coordinates, and the run folder is left alone; a
checkpoint or --out it cannot use is refused in one line."""

import pytest
import torch
from helpers import error_lines, load_benchmark, only_run_dir, run_script, run_script_in_process

sobolev_split = load_benchmark("sobolev_split")

TINY = (
    "--total-timesteps 160 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --batch-size 16 "
    "--eval-frequency 80 --eval-episodes 1"
).split()
DISTRIBUTIONAL = ["--num-samples", "4", "--num-samples-policy", "3", "--noise-dim", "8"]
TINY_FLAGS = {
    "mage_huber_sobolev.py": TINY,
    "dsdpg_mmd_sobolev.py": TINY + DISTRIBUTIONAL,
    "dsdpg_msmmd_sobolev.py": TINY + DISTRIBUTIONAL + ["--slice-steps", "5"],
}


def files_of(folder) -> dict:
    return {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}


@pytest.mark.slow
@pytest.mark.parametrize("script", TINY_FLAGS)
def test_the_two_parts_add_up_to_the_update_gradient_and_the_run_is_left_alone(tmp_path, script):
    result = run_script(script, *TINY_FLAGS[script], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    before = files_of(run_dir)
    module, built, step = sobolev_split.resume_until_loop(str(run_dir))
    assert module.__name__ == script.removesuffix(".py") and step == 160
    rows = sobolev_split.measure(module, built, 3)
    # the script's own backward of the last batch left the whole gradient in .grad (its optimiser step disabled)
    whole = torch.cat([p.grad.flatten() for p in built["critic"].parameters() if p.grad is not None])
    assert rows[-1]["grad_norm_total"] == pytest.approx(whole.norm().item(), rel=1e-5)
    assert len(rows) == 3 and all(0.0 < row["value_share"] < 1.0 for row in rows)
    assert len({row["grad_norm_total"] for row in rows}) == 3  # a fresh replay batch each time
    assert files_of(run_dir) == before  # no TensorBoard file, no checkpoint written in the run


@pytest.mark.slow
def test_without_the_action_gradient_term_the_return_takes_the_whole_step(tmp_path):
    """MAGE's loss with grad_loss_weight 0 is the TD term alone: the action-gradient part is exactly zero."""
    result = run_script("mage_huber_sobolev.py", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    module, built, _ = sobolev_split.resume_until_loop(str(only_run_dir(tmp_path)))
    built["args"].grad_loss_weight = 0.0  # read by the update at each call
    [row] = sobolev_split.measure(module, built, 1)
    assert row["value_share"] == 1.0 and row["grad_norm_action_grad"] == 0.0 and row["grad_norm_return"] > 0.0


def test_a_checkpoint_of_another_script_is_refused_in_one_line(tmp_path):
    torch.save({"script": "td3_huber.py"}, tmp_path / "checkpoint.pt")
    with pytest.raises(SystemExit, match=r"^sobolev_split.py: error: .* is not a checkpoint of a Sobolev script"):
        sobolev_split.main(sobolev_split.Args(checkpoint=str(tmp_path)))
    with pytest.raises(SystemExit, match=r"^sobolev_split.py: error: no checkpoint at"):
        sobolev_split.main(sobolev_split.Args(checkpoint=str(tmp_path / "missing")))


def test_an_out_it_cannot_write_is_refused_before_the_checkpoint_is_read(tmp_path):
    """--out in a missing folder, under a file or that is a folder: one line naming it and why, exit status 1, before
    the checkpoint is looked at (the missing one is not what is blamed); nothing printed, nothing written."""
    (tmp_path / "a_file").write_text("")
    for out, reason in (
        ("no/such/folder/split.json", "No such file or directory"),
        ("a_file/split.json", "Not a directory"),
        (".", "a folder"),
    ):
        result = run_script_in_process("benchmarks/sobolev_split.py", "missing_run", "--out", out, cwd=tmp_path)
        assert result.returncode == 1 and result.stdout == ""
        assert error_lines(result) == [f"sobolev_split.py: error: --out {out}: cannot write there ({reason})"]
        assert [path.name for path in tmp_path.iterdir()] == ["a_file"]
