"""flows/train.py's module docstring draws the flow by hand: its start line and its
`for each iteration k:` block name the stages in the layout's order (INIT_STAGES,
ITERATION_STAGES), so the picture a reader meets first stays true."""
from __future__ import annotations

import re

from mars_core.run import layout
from mars_core.run.layout import BUILD_PLAYERS, FILTER_STEPS, REPLAYS


def _docstring_chain(doc: str) -> tuple[list[str], list[str]]:
    """The stage names, in order, of a flow docstring's start line (its first line after the
    title) and of its `for each iteration k:` block (up to the first line in parentheses)."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("for each iteration"))
    block = []
    for line in lines[start + 1:]:
        if not line.startswith(" " * 8) or line.strip().startswith("("):
            break
        block.append(line)
    stages = sorted({*layout.INIT_STAGES, *layout.ITERATION_STAGES}, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, stages)) + r")\b")
    head = next(line for line in lines[1:start] if line.strip())
    return pattern.findall(head), pattern.findall("\n".join(block))


def test_the_train_flows_docstring_lists_the_stages_in_the_layouts_order():
    import flows.train

    head, iteration = _docstring_chain(flows.train.__doc__)
    assert head == list(layout.INIT_STAGES), f"flows/train.py's docstring: start with {head}"
    assert iteration == list(layout.ITERATION_STAGES), (
        "flows/train.py's docstring, 'for each iteration k:', names "
        f"{' -> '.join(iteration)}; the layout's ITERATION_STAGES: "
        f"{' -> '.join(layout.ITERATION_STAGES)}")


def test_the_docstring_check_sees_a_stage_out_of_order_or_missing():
    import flows.train

    doc = flows.train.__doc__
    swapped = doc.replace(f"{BUILD_PLAYERS} -> {FILTER_STEPS}",
                          f"{FILTER_STEPS} -> {BUILD_PLAYERS}")
    assert swapped != doc and _docstring_chain(swapped)[1] != list(layout.ITERATION_STAGES)
    dropped = doc.replace("-> replays (HTML pages)", "")
    assert dropped != doc
    assert _docstring_chain(dropped)[1] == [s for s in layout.ITERATION_STAGES if s != REPLAYS]
