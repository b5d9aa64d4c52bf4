"""`make reason` (claim 3) as make would run it: the evaluation's --out folder is made before the
evaluation asks for it (`mars eval mas` refuses a missing folder), and LIMIT, MAX_TOKENS and
BATCH reach the evaluation."""
from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from mars_core.run.layout import final_model_dir, start_model_dir
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _planned(*args):
    done = subprocess.run(["make", "-n", "-C", str(REPO), "reason", *args],
                          capture_output=True, text=True, check=True)
    # one command per logical line (make -n keeps the recipe's backslash continuations)
    return [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines()
            if line.strip() and not line.startswith("make")]


def test_reason_makes_the_out_folder_before_the_evaluation():
    cmds = _planned()
    made = set()
    evals = 0
    for argv in cmds:
        if argv[:2] == ["mkdir", "-p"]:
            made.update(argv[2:])
        if "eval" in argv and "mas" in argv:
            out = argv[argv.index("--out") + 1]
            assert out.rsplit("/", 1)[0] in made, f"{out}'s folder is not made first"
            evals += 1
    assert evals == 1


def test_reason_passes_its_knobs_to_the_evaluation():
    argv = next(a for a in _planned("LIMIT=4", "MAX_TOKENS=128", "BATCH=24",
                                    "RECIPE=configs/learning/generalist.yaml")
                if "eval" in a and "mas" in a)

    def value(flag):
        return argv[argv.index(flag) + 1]
    knobs = (value("--limit"), value("--max-new-tokens"), value("--batch-size"))
    assert knobs == ("4", "128", "24")
    run = Path("runs/reason-generalist")  # the run folder's layout, asked of its module
    assert value("--model") == str(final_model_dir(run))
    assert value("--baseline") == str(start_model_dir(run))
    default = next(a for a in _planned() if "eval" in a and "mas" in a)
    assert default[default.index("--limit") + 1] == "6"  # what docs/claims.md ran
    assert default[default.index("--batch-size") + 1] == "36"
