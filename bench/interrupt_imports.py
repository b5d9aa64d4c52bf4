"""Interrupts that land while the main thread imports: how often one leaves the interpreter's
import lock, or a module's lock, held for good (the hang of a signalled `mars train`: its
Prefect thread's next import waits forever), with Python's own handling (a handler that
raises KeyboardInterrupt wherever it lands, as Ctrl-C's default does) and with `mars`'s
(`cli.signals.handle_like_ctrl_c`, which puts off one that lands in the import machinery).
Each arm runs in a process of its own: the main thread imports a few standard modules again
and again while a thread sends it SIGTERM every 0.5-4 ms.

    python bench/interrupt_imports.py [--seconds 20]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ARM = r"""
import _imp, importlib, importlib._bootstrap as boot, json, os, random, signal, sys
import threading, time
arm, seconds = sys.argv[1], float(sys.argv[2])
if arm == "mars":
    from cli import signals
    signals.handle_like_ctrl_c()
else:
    def python(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, python)
NAMES = ["json", "csv", "difflib", "fractions", "email.mime.text", "xml.dom.minidom",
         "http.cookies", "ftplib"]
me = threading.get_ident()


def shooter():
    while True:
        time.sleep(random.uniform(0.0005, 0.004))
        os.kill(os.getpid(), signal.SIGTERM)


def module_locks_held():
    held = 0
    for ref in list(boot._module_locks.values()):
        lock = ref()
        if lock is not None and getattr(lock, "owner", None) == me and lock.count:
            held += 1
            lock.count, lock.owner = 0, None  # given back, so the arm goes on
    return held


threading.Thread(target=shooter, daemon=True).start()
out = {"interrupts": 0, "imports": 0, "import_lock_left_held": 0, "module_locks_left_held": 0}
end = time.time() + seconds
while time.time() < end:
    try:
        for name in NAMES:
            for m in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[m]
            importlib.import_module(name)
            out["imports"] += 1
    except KeyboardInterrupt:
        out["interrupts"] += 1
        if _imp.lock_held():
            out["import_lock_left_held"] += 1
            while _imp.lock_held():
                _imp.release_lock()
        out["module_locks_left_held"] += module_locks_held()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="each arm's length")
    args = ap.parse_args()
    print("| handler | imports | interrupts | import lock left held | module locks left held |")
    print("|---|---|---|---|---|")
    for arm in ("python", "mars"):
        done = subprocess.run([sys.executable, "-c", ARM, arm, str(args.seconds)], cwd=REPO,
                              capture_output=True, text=True, timeout=args.seconds + 120)
        if done.returncode != 0:
            sys.exit(f"the {arm} arm failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {arm} | {r['imports']} | {r['interrupts']} | {r['import_lock_left_held']} "
              f"| {r['module_locks_left_held']} |")


if __name__ == "__main__":
    main()
