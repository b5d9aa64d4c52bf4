import pytest

from mars_core.run.commit import MARKER, is_done, stage_output


def test_stage_output_is_atomic(tmp_path):
    d = tmp_path / "iter_0000" / "rollout"
    with pytest.raises(RuntimeError):
        with stage_output(d) as out:
            (out / "half.txt").write_text("x")
            raise RuntimeError("crash")
    assert not d.exists() and not is_done(d)
    with stage_output(d) as out:
        (out / "data.txt").write_text("done")
    assert is_done(d) and (d / "data.txt").read_text() == "done" and (d / MARKER).exists()
    assert not (tmp_path / "iter_0000" / "rollout.partial").exists()
