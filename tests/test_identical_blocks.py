"""The blocks the six RL scripts share are meant to stay identical: a change made in one copy fails here until it is
made in every copy (the copies are the price of scripts that each read, and copy, as their algorithm). What every script
does the same way and is not the algorithm is not copied at all: it lives once in replay_buffer.py and
run_bookkeeping.py, and no script defines it again."""

import ast

import helpers
import pytest

ROOT = helpers.ROOT
SCRIPTS = list(helpers.RL_SCRIPTS)
DISTRIBUTIONAL = ["mmd_critic", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"]
DSDPG = ["dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"]

# top-level function or class -> the scripts whose copies must be identical to the letter
IDENTICAL = {
    **{
        name: SCRIPTS
        for name in [
            "make_env",
            "EnsembleLinear",
            "Actor",
            "SkipMLP",
            "RunningNormaliser",
            "make_world_model",
            "dyna_rewards",
            "contraction_factor",
        ]
    },
    "WorldModel": ["td3_huber", "mage_huber_sobolev", "mmd_critic", "iqn"],
    "Critic": DISTRIBUTIONAL,
    "multiquadric_kernel": DISTRIBUTIONAL,
    "mmd2": DISTRIBUTIONAL,
    "truncate_top": DISTRIBUTIONAL + ["iqn"],
    "check_args": ["mmd_critic", "dsdpg_mmd_sobolev"],
    **{name: DSDPG for name in ["PerCopyPrior", "WorldModel_dsdpg", "sobolev_targets", "sobolev_samples"]},
}


def top_level_blocks(script: str) -> dict[str, str]:
    """name -> source text of every top-level function and class of a script."""
    lines = (ROOT / f"{script}.py").read_text().split("\n")
    tree = ast.parse("\n".join(lines))
    return {  # top-level blocks start at a line's start and end at its end: whole lines, from `def`/`class` on
        node.name: "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }


@pytest.mark.parametrize("name", sorted(IDENTICAL))
def test_shared_blocks_are_identical_in_every_copy(name):
    block = name.removesuffix("_dsdpg")
    scripts = IDENTICAL[name]
    copies = {script: top_level_blocks(script).get(block) for script in scripts}
    missing = [script for script, text in copies.items() if text is None]
    assert not missing, f"{block} is missing from {missing}"
    reference = copies[scripts[0]]
    differing = [script for script, text in copies.items() if text != reference]
    assert not differing, f"{block} differs from {scripts[0]}.py's copy in {differing}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_script_defines_again_what_the_shared_modules_hold(script):
    shared = set()
    for module in ("replay_buffer", "run_bookkeeping", "flag_extras", "flow_world_model"):
        tree = ast.parse((ROOT / f"{module}.py").read_text())
        shared |= {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert {"Run", "run_settings", "make_gym_env", "ReplayBuffer", "FlowWorldModel", "CudaGraphStep"} <= shared
    assert not shared & top_level_blocks(script).keys()


def test_the_check_fails_on_a_changed_copy(tmp_path, monkeypatch):
    """The comparison sees a one-character change in one copy (so the test above can fail)."""
    for script in SCRIPTS:
        (tmp_path / f"{script}.py").write_text((ROOT / f"{script}.py").read_text())
    changed = tmp_path / "iqn.py"
    changed.write_text(changed.read_text().replace("clamp_min(self.min_std)", "clamp_min(self.min_std * 1)", 1))
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    test_shared_blocks_are_identical_in_every_copy("EnsembleLinear")
    with pytest.raises(AssertionError, match="RunningNormaliser differs .* \\['iqn'\\]"):
        test_shared_blocks_are_identical_in_every_copy("RunningNormaliser")


LIBRARY = ["run_bookkeeping", "flag_extras", "flow_world_model", "replay_buffer", "noise_wrappers", "pointmass_env"]


def project_imports(module: str) -> set[str]:
    """The project modules `module` imports anywhere in its file (at the top, or lazily inside a function)."""
    imported = set()
    for node in ast.walk(ast.parse((ROOT / f"{module}.py").read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    return imported & set(LIBRARY + SCRIPTS)


def test_the_library_never_calls_back_into_a_script():
    """Imports go one way, lazy ones included: scripts import the library modules, a library module imports no script
    and no module that imports it back (flag_extras and flow_world_model import no project module; run_bookkeeping
    imports flag_extras under its flags); no script hands its own module (`sys.modules[__name__]`) to the library."""
    graph = {module: project_imports(module) for module in LIBRARY + SCRIPTS}
    for module in LIBRARY:
        assert not graph[module] & set(SCRIPTS), (module, graph[module])
    assert graph["flag_extras"] == graph["flow_world_model"] == set() and graph["run_bookkeeping"] == {"flag_extras"}

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in graph[start])

    assert not [module for module in graph if reaches(module, module)]
    for script in SCRIPTS:
        assert "sys.modules" not in (ROOT / f"{script}.py").read_text(), script


@pytest.mark.parametrize("script", SCRIPTS)
def test_main_hands_the_library_values_never_its_own_functions_or_classes(script):
    """main() holds its control, as CleanRL's does: no call into run_bookkeeping or flag_extras receives a function or
    class the script defines at its top level (check_args, make_env, Actor, ...) or a lambda; it receives args, envs,
    networks, optimizers, lists. (The update steps, closures inside main(), go to flag_extras.CudaGraphStep, which
    captures them.)"""
    tree = ast.parse((ROOT / f"{script}.py").read_text())
    own = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert {"check_args", "make_env", "Actor", "main"} <= own
    library_calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "flag_extras":
            own_imports = {alias.asname or alias.name for alias in node.names}
            library_calls += [
                call
                for call in ast.walk(tree)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in own_imports
            ]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if isinstance(node.func.value, ast.Name) and node.func.value.id in ("run_bookkeeping", "flag_extras"):
                library_calls.append(node)
    assert any(call.func.attr == "Run" for call in library_calls if isinstance(call.func, ast.Attribute))
    for call in library_calls:
        handed = {arg.id for arg in ast.walk(call) if isinstance(arg, ast.Name)} - {getattr(call.func, "id", None)}
        assert not handed & own, (script, ast.unparse(call), handed & own)
        assert not any(isinstance(node, ast.Lambda) for node in ast.walk(call)), (script, ast.unparse(call))
