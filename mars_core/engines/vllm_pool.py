"""vLLM data parallel: the `Engine` interface over several vLLM servers (replicas of one
model), for rollouts larger than one server.

- routing: each of a call's prompts goes to the live server with the fewest requests
  outstanding (ours, counted as they are sent and answered; ties: the first listed), so a
  slow server gets fewer and no server idles while another queues;
- a server that leaves a request unanswered (gone, refused, cut off) leaves the pool, and
  the request, with every later one, goes to the others; the call fails only when none is
  left. A request the server answers with an error fails the call at once, as with one
  server (another server would refuse it too);
- `load_weights` makes every server reload the new checkpoint (all at once) before the next
  rollout; a server that cannot leaves the pool (it would serve old weights);
- seeds travel with each request (`prompt_seed`), so a reply does not depend on the server
  that drew it, beyond the last bits of the batch it was computed in.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mars_core.engines.vllm_client import VLLMEngine, generate_counted
from mars_core.engines.vllm_server import VLLMError, VLLMUnreachable
from mars_core.types import Completion, SamplingParams


class VLLMPool:
    def __init__(self, replicas: list[VLLMEngine]):
        if not replicas:
            raise VLLMError("a vLLM pool needs at least one server")
        self.replicas = list(replicas)
        self.live = list(range(len(replicas)))
        self.tokenizer = replicas[0].tokenizer
        self.max_positions = min(r.max_positions for r in replicas)
        self.stats = {"calls": 0, "prompts": 0, "prompt_tokens": 0, "generated_tokens": 0,
                      "seconds": 0.0,
                      "max_in_flight": 0, "reloads": 0, "reload_seconds": 0.0,
                      "replicas": len(replicas), "retried": 0, "left": 0,
                      "per_replica": [0] * len(replicas)}

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    @property
    def server(self):  # the pool's servers are stopped through `servers`
        return None

    @property
    def servers(self) -> list:
        return [r.server for r in self.replicas if r.server is not None]

    @property
    def served(self) -> str | None:
        paths = {self.replicas[i].served for i in self.live}
        return paths.pop() if len(paths) == 1 else None

    def _leave(self, i: int, why: str) -> None:
        if i in self.live:
            self.live.remove(i)
            self.stats["left"] += 1
            print(f"vLLM server {self.replicas[i].url} left the pool: {why}", flush=True)

    # -- weights -------------------------------------------------------------------------
    def load_weights(self, path: str | Path) -> float:
        """Every live server reloads `path` (concurrently); returns the seconds taken."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, len(self.live))) as pool:
            results = list(pool.map(lambda i: (i, _try(self.replicas[i].load_weights, path)),
                                    list(self.live)))
        errors = [(i, e) for i, e in results if isinstance(e, Exception)]
        if len(errors) == len(results):
            raise errors[0][1]
        for i, e in errors:
            self._leave(i, f"could not reload the weights: {e}")
        seconds = time.perf_counter() - start
        self.stats["reloads"] += 1
        self.stats["reload_seconds"] += seconds
        return seconds

    def serve(self, path: str | Path) -> None:
        if any(self.replicas[i].served != str(Path(path).resolve()) for i in self.live):
            self.load_weights(path)

    # -- sampling ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in input order, each request on the live server with
        the fewest outstanding."""
        return generate_counted(self, prompts, params)

    def _pick(self) -> int:
        """The live server with the fewest requests outstanding (ties: the first listed)."""
        if not self.live:
            raise VLLMError("every vLLM server of the pool has failed: "
                            + ", ".join(self.urls) + "; run the same command again to resume")
        in_flight = sum(r.in_flight for r in self.replicas) + 1  # with the one about to go
        self.stats["max_in_flight"] = max(self.stats["max_in_flight"], in_flight)
        return min(self.live, key=lambda i: (self.replicas[i].in_flight, i))

    async def _generate_all(self, prompts, params) -> list[Completion]:
        clients = [r.client() for r in self.replicas]
        limit = asyncio.Semaphore(sum(r.max_concurrency for r in self.replicas))
        try:
            async def one(i: int, prompt: list[int]) -> Completion:
                async with limit:
                    while True:
                        r = self._pick()
                        try:
                            c = await self.replicas[r].complete(clients[r], i, prompt, params)
                        except VLLMUnreachable as e:  # an error answer is raised as is
                            self._leave(r, str(e))
                            self.stats["retried"] += 1
                            continue
                        self.stats["per_replica"][r] += 1
                        return c

            return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
        finally:
            for c in clients:
                await c.aclose()


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 (the caller decides: leave the pool, or raise)
        return e
