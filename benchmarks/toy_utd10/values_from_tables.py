"""One-off (issue 47): the critic values of toy_utd10's committed runs, whose TensorBoard events were not kept, moved
from the pages' value tables into each run's summary.json (`critic_values`, 2 decimals as the tables give them, with
their source), so that `python benchmarks/value_check.py benchmarks/toy_utd10 --bound 10` runs from a fresh clone.
A run is matched on (method, env, seed) and its final return (to the tables' 2 decimals); runs that already hold
values are left alone. Prints what it matched and what it could not.

    python benchmarks/toy_utd10/values_from_tables.py
"""

import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
TABLES = {"value_check.md": "PointMass5-v0", "trend/value_check.md": None}  # None: the env is each section's heading
ROW = re.compile(r"^\| ([\w-]+) \| (\d+) \| ([-\d.]+) \| ([-\d.]+) \| ([-\d.]+) \|$")


def table_rows() -> dict[tuple[str, str, int], list[tuple[float, float, float, str]]]:
    rows: dict = {}
    for name, env in TABLES.items():
        with open(os.path.join(HERE, name)) as f:
            for line in f:
                if line.startswith("## "):
                    env = line[3:].strip()
                elif match := ROW.match(line.strip()):
                    script, seed, mean, top, final = match.groups()
                    rows.setdefault((script, env, int(seed)), []).append((float(mean), float(top), float(final), name))
    return rows


def main() -> None:
    rows, moved, missing = table_rows(), 0, []
    for path in sorted(glob.glob(os.path.join(HERE, "**", "summary.json"), recursive=True)):
        with open(path) as f:
            summary = json.load(f)
        if summary.get("critic_values") is not None:
            continue
        args = summary["args"]
        key = (args["exp_name"], args["env_id"], args["seed"])
        found = [row for row in rows.get(key, []) if abs(row[2] - summary["final_eval_return"]) < 0.006]
        if not found:
            missing.append(os.path.relpath(path, HERE))
            continue
        mean, top, _, source = found[0]
        summary["critic_values"] = {
            "tag": "losses/qf1_values",
            "window_steps": 2000,
            "mean": mean,
            "max": top,
            "source": f"benchmarks/toy_utd10/{source} (2 decimals; the run's TensorBoard events were not kept)",
        }
        with open(path, "w") as f:
            json.dump(summary, f, indent=2)
        moved += 1
    print(f"{moved} runs given their values from the tables; {len(missing)} without a row:")
    print("\n".join(f"  {path}" for path in missing))


if __name__ == "__main__":
    main()
