"""vLLM as the rollout engine: a server process in its own environment, reached over HTTP.

vLLM's pins conflict with Prefect's, so it never shares our environment: `VLLMServer` starts
`vllm.entrypoints.openai.api_server` with another interpreter (the `.venv-vllm` that
`make vllm-env` builds, or any Python with vLLM on a GPU node), or the pipeline is pointed at a
running server by URL. `VLLMEngine` is the client behind the same `Engine` interface as the
in-process sampler (`mars_core.engines.vllm_client`), so the game loop does not change.

Safety of a server we start:
- vLLM's own `--api-key` check guards the `/v1`, `/v2`, `/inference` and `/cohere` routes
  only, not the dev-mode ones (`/collective_rpc`, `/reset_prefix_cache`, `/sleep`, ...; vllm
  0.32.0, `entrypoints/serve/middleware/authenticate.py`), which the weight reload needs; our
  middleware `mars_vllm_ext.RequireKey` puts every route but `/health` behind the key;
- it listens on a loopback address (`engine.vllm.launch.host`), or, placed by Ray
  (`tasks/vllm_ray.py`), on its node's address: then only over TLS with a certificate made
  for that start and pinned by the client (`vllm_tls`), and only with a key; dev mode (the
  weight reload) is on for a loopback address or behind both, and a server on a network
  address without them is refused;
- each start gets a new random API key (`secrets`), given to the server as VLLM_API_KEY in its
  environment (never on its command line, where `ps` shows it, nor in a log or config); the
  client sends it as `Authorization: Bearer` on every request. A server given by URL gets the
  key from the environment variable `engine.vllm.api_key_env` names;
- it never outlives the pipeline (`mars_core.run.procgroup.start_group`: a keeper kills it when
  the pipeline's process is gone, kill -9 included); `<log dir>/vllm_server.pid` records its
  group, and the next start kills a group whose recorded parent died.
"""
from __future__ import annotations

import atexit
import math
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from mars_core.run import offline
from mars_core.config.engine import GiB, is_loopback
from mars_core.engines.vllm_tls import SelfSigned, pinned_context
from mars_core.run.procgroup import ProcessGroupError, start_group, stop_group


EXTENSION_DIR = Path(__file__).parent / "vllm_ext"  # on the server's PYTHONPATH
EXTENSION = "mars_vllm_ext.WeightSync"
MIDDLEWARE = "mars_vllm_ext.RequireKey"


class VLLMError(RuntimeError):
    """A vLLM server could not be started, reached or asked to do something (one line)."""


class VLLMUnreachable(VLLMError):
    """A request got no answer: the server is gone, refused the connection or cut it off
    (not a request the server answered with an error)."""


def cpu_kv_cache_gib(nbytes: int) -> int:
    """VLLM_CPU_KVCACHE_SPACE for a KV cache of `nbytes`: vLLM's CPU build reads it as a whole
    number of GiB (`int(...) * GiB_bytes`, vllm 0.32.0 `platforms/cpu.py`), so rounded up."""
    if nbytes <= 0:
        raise ValueError(f"the CPU KV cache needs a positive size, got {nbytes} bytes")
    return math.ceil(nbytes / GiB)


def launch_command(python: str, model: str, *, port: int, host: str = "127.0.0.1",
                   dtype: str = "auto", max_model_len: int | None = None,
                   gpu_memory_utilization: float = 0.5, seed: int = 0,
                   enforce_eager: bool = False, extra_args: tuple[str, ...] = (),
                   tls: SelfSigned | None = None) -> list[str]:
    """The server's command line. `--generation-config vllm`: the model folder's sampling
    defaults never change what we ask for; `served-model-name policy`: requests do not depend
    on the folder currently loaded; `--middleware`: with VLLM_API_KEY set, every route but
    /health wants the key; `tls`: HTTPS with that key and certificate. Never an API key: the
    command line is public (`ps`)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "policy", "--host", host, "--port", str(port),
           "--dtype", dtype, "--gpu-memory-utilization", str(gpu_memory_utilization),
           "--seed", str(seed), "--logprobs-mode", "processed_logprobs",
           "--generation-config", "vllm", "--disable-uvicorn-access-log",
           "--worker-extension-cls", EXTENSION, "--middleware", MIDDLEWARE]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if enforce_eager:
        cmd.append("--enforce-eager")
    if tls is not None:
        cmd += ["--ssl-keyfile", str(tls.keyfile), "--ssl-certfile", str(tls.certfile)]
    if not any("chunked-prefill" in a for a in extra_args) and not _cuda():
        # vLLM 0.32.0's CPU build kills its engine when a seeded request's prefill is split
        # over two steps ("CPU Generator does not use offset": it rewinds the request's
        # generator, which CPU generators cannot): every request of ours is seeded, so any
        # call of more than 2,048 prompt tokens (two dozen game turns) would. Whole prefills
        # only, on a CPU.
        cmd.append("--no-enable-chunked-prefill")
    return cmd + list(extra_args)


def _cuda() -> bool:
    """Whether this machine, where the server starts, has a CUDA GPU."""
    import torch

    return torch.cuda.is_available()


class VLLMServer:
    """A vLLM OpenAI-compatible server that we start (`start`) and stop (`stop`).

    `command` is any command line with `--host` and `--port` (`launch_command`'s). It runs
    under `start_group` (its own session, gone with this process, recorded in `pid_file`:
    by default `vllm_server.pid` beside `log_path`, where its output goes) with the hub
    offline, the CPU build's KV cache at `cpu_kv_cache_bytes`, the API key `api_key` (None:
    no key) in its environment, and `VLLM_SERVER_DEV_MODE=1` (the weight-reload and cache
    endpoints). A host that is not a loopback address needs `tls` (the command's
    certificate: `launch_command(..., tls=)`) and a key, else VLLMError; `tls`'s files are
    removed once the server answers (it loaded them) or fails to start."""

    def __init__(self, command: list[str], *, env: dict[str, str] | None = None,
                 log_path: str | Path | None = None, startup_timeout_s: float = 900,
                 api_key: str | None = None, cpu_kv_cache_bytes: int = GiB,
                 pid_file: str | Path | None = None, tls: SelfSigned | None = None):
        python = command[0]
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise VLLMError(f"no vLLM environment at {python!r} (engine.vllm.launch.python): build "
                            "it with `make vllm-env`, point it at a Python that has vLLM, or set "
                            "engine.vllm.url to a running server")
        self.command = command
        self.host = command[command.index("--host") + 1]
        self.port = int(command[command.index("--port") + 1])
        if not is_loopback(self.host) and not (tls and api_key):
            raise VLLMError(f"a vLLM server on the network address {self.host} needs TLS and an "
                            "API key (its weight-reload endpoints run code in the server)")
        if tls is not None and str(tls.certfile) not in command:
            raise VLLMError("the vLLM server's certificate is not on its command line "
                            "(launch_command(..., tls=))")
        self.tls = tls
        where = self.host if ":" not in self.host else f"[{self.host}]"
        self.url = f"{'https' if tls else 'http'}://{where}:{self.port}"
        self.dev_mode = True  # loopback, or behind TLS and the key
        path = os.pathsep.join(p for p in (str(EXTENSION_DIR), os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, **offline.ENV, "PYTHONPATH": path, **(env or {}),
                    "VLLM_SERVER_DEV_MODE": "1",
                    "VLLM_CPU_KVCACHE_SPACE": str(cpu_kv_cache_gib(cpu_kv_cache_bytes))}
        self.env.pop("VLLM_API_KEY", None)  # the caller's key for other servers is not ours
        if api_key:
            self.env["VLLM_API_KEY"] = api_key
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.verify = pinned_context(tls.cert_pem) if tls else True
        self.log_path = Path(log_path or Path(tempfile.gettempdir()) / f"mars-vllm-{self.port}.log")
        self.pid_file = Path(pid_file) if pid_file else self.log_path.with_suffix(".pid")
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None

    def start(self) -> str:
        """Start the process and wait until `/health` answers; returns the base URL."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.log_path, "ab") as log:
                self.process = start_group(self.command, self.pid_file, env=self.env, stdout=log)
        except ProcessGroupError as e:
            raise VLLMError(f"cannot start the vLLM server: {e}") from None
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self.stop()
                raise VLLMError(f"the vLLM server exited with code {code} while starting: "
                                f"{last_line(self.log_path)} (log: {self.log_path})")
            try:
                if httpx.get(self.url + "/health", headers=self.headers, verify=self.verify,
                             timeout=2).status_code == 200:
                    if self.tls is not None:  # loaded once at the start: no longer on disk,
                        self.tls.remove()  # so a server killed with its actor leaves no key
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise VLLMError(f"the vLLM server did not answer within {self.startup_timeout_s:.0f} s "
                        f"(engine.vllm.launch.startup_timeout_s); log: {self.log_path}")

    def gone(self, wait_s: float = 0) -> str | None:
        """None while the server runs (after waiting up to `wait_s` for it to end); else one
        line: how it ended, its log's last line when it exited by itself, the log's path."""
        proc = self.process
        if proc is None:
            return f"the vLLM server at {self.url} was stopped"
        try:
            code = proc.wait(timeout=wait_s) if wait_s > 0 else proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return None
        how = killed_by(code) or f"exited with code {code}: {last_line(self.log_path)}"
        return f"the vLLM server (pid {proc.pid}) died ({how}); log: {self.log_path}"

    @property
    def cert_pem(self) -> str | None:
        """The certificate a client pins (None: plain HTTP on a loopback address)."""
        return self.tls.cert_pem if self.tls else None

    def stop(self) -> None:
        """Stop the server's process group (SIGTERM, then SIGKILL after 30 s); remove its pid
        file (and its TLS key, if still there)."""
        proc, self.process = self.process, None
        if proc is not None:
            stop_group(proc, self.pid_file)
        if self.tls is not None:
            self.tls.remove()


def killed_by(code: int) -> str | None:
    """"killed by SIGKILL" for a process's exit status -9 or 137 (the keeper's 128 + signal
    for its command); None for an exit by itself."""
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        return f"killed by {signal.Signals(sig).name}" if sig else None
    except ValueError:
        return None


def last_line(path: Path) -> str:
    """The last non-empty line of a log file (the usual cause of a failed start)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
    except OSError:
        return "(no log)"
    return next((ln for ln in reversed(lines) if ln), "(empty log)")[-300:]


INVARIANT_GPUS = ("NVIDIA GPUs of compute capability 8.0 or newer, AMD Instinct gfx90a, gfx942 "
                  "and gfx950 (vLLM 0.32's batch invariance docs)")


def batch_invariant_env(setting: str) -> tuple[dict[str, str], str | None]:
    """`engine.vllm.launch.batch_invariant` as the servers' environment: ({VLLM_BATCH_INVARIANT:
    "1"} or {}, the reason it is off where `auto` turned it off). `auto` asks this machine's
    GPU (the servers the pipeline starts run here, or on nodes like it); `on` sets it whatever
    the device (vLLM refuses it where it cannot)."""
    if setting == "off":
        return {}, None
    if setting == "on":
        return {"VLLM_BATCH_INVARIANT": "1"}, None
    import torch

    if not torch.cuda.is_available():
        return {}, f"no GPU here; vLLM's batch-invariant mode runs on {INVARIANT_GPUS}"
    name = torch.cuda.get_device_name(0)
    if getattr(torch.version, "hip", None):
        arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "").split(":")[0]
        supported = arch in ("gfx90a", "gfx942", "gfx950")
    else:
        supported = torch.cuda.get_device_capability(0) >= (8, 0)
    if supported:
        return {"VLLM_BATCH_INVARIANT": "1"}, None
    return {}, (f"{name} is not among the devices vLLM's batch-invariant mode runs on "
                f"({INVARIANT_GPUS})")


def server_env(setting: str, env: dict[str, str]) -> dict[str, str]:
    """The environment the servers the pipeline starts get: `engine.vllm.launch.env` over the
    batch-invariant setting (`launch.batch_invariant`; where `auto` leaves it off, the reason is
    printed)."""
    invariant, why = batch_invariant_env(setting)
    if why:
        print(f"engine.vllm.launch.batch_invariant: off ({why})", flush=True)
    return {**invariant, **env}
