import hashlib, subprocess, os
from pathlib import Path
from tests.faults.conftest import run_env, train, train_args


def digests(run):
    out = {}
    for f in sorted(Path(run).rglob("*.safetensors")):
        out[str(f.relative_to(run))] = hashlib.sha256(f.read_bytes()).hexdigest()[:12]
    return out


def test_det(tmp_path, tiny_model_dir, prefect_api):
    res = {}
    for name, load in [("a", 0), ("b", 0), ("c", 3), ("d", 0)]:
        hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(load)]
        try:
            env = run_env(prefect_api)
            if name == "d":
                env["OMP_NUM_THREADS"] = "1"
            done = train(train_args(tmp_path / name, name, tiny_model_dir), env)
            assert done.returncode == 0, done.stderr[-2000:]
        finally:
            for h in hogs:
                h.kill()
        res[name] = digests(tmp_path / name / name)
        print(name, res[name], flush=True)
    for k in res["a"]:
        print(k, [res[n].get(k) for n in res])
