"""benchmarks/mujoco_questions/tables.py: what it counts as solved and kept, and when it calls two groups apart."""

from helpers import load_benchmark

tables = load_benchmark("mujoco_questions/tables")


def run(*returns: float) -> dict:
    return {"eval_returns": list(returns)}


def test_solved_and_kept_read_the_evaluations_after_the_first_solve():
    """Solved: an evaluation >= 9 350; kept: none below 9 000 after the first such (mujoco_cpu/stability.md's count)."""
    assert tables.solved_and_kept(run(100, 9000, 9349.9)) == (False, False)
    assert tables.solved_and_kept(run(100, 9350, 9001, 9360)) == (True, True)
    assert tables.solved_and_kept(run(8000, 9360, 8999, 9360)) == (True, False)  # dropped once: not kept
    assert tables.solved_and_kept(run(500, 9360)) == (True, True)  # solved at the last evaluation


def test_two_groups_separate_when_cis_are_apart_or_every_run_is_above():
    assert tables.separation([10.0, 11.0, 12.0], [1.0, 2.0, 3.0]) == "above"
    assert tables.separation([1.0, 2.0, 3.0], [10.0, 11.0, 12.0]) == "below"
    assert tables.separation([1.0, 5.0, 9.0], [2.0, 6.0, 8.0]) == "not separable"
    assert tables.separation([4.0, 5.0, 100.0], [1.0, 2.0, 3.0]) == "above"  # every run above, whatever the CIs
    assert tables.separation([], [1.0]) == "-"
