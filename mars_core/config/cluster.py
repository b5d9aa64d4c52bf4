"""Config of scale-out (`cluster`): how many shards the games of a stage split into, and the
Ray cluster (prefect-ray's task runner) that runs them. No address: the shards run in this
process, one after another through Prefect's thread pool."""
from __future__ import annotations

from pydantic import Field, field_validator

from mars_core.config.base import _Section


class RayConfig(_Section):
    # null: no cluster; "auto": the cluster this machine belongs to (`ray start` ran here);
    # "ray://host:10001" (Ray Client) or "host:6379" (a head node's GCS)
    address: str | None = None
    cpus_per_shard: float = Field(1.0, gt=0)  # what each shard task asks Ray for
    gpus_per_shard: float = Field(0.0, ge=0)  # an in-process engine on a GPU node: 1
    # environment variables the shard workers get besides the pipeline's own (offline flags,
    # PREFECT_API_URL): e.g. HF_HOME on a shared filesystem
    env: dict[str, str] = {}

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("an empty address: leave it out (no cluster) or name one, or 'auto'")
        return v


class ClusterConfig(_Section):
    # shards per stage that plays games (rollouts, the game evaluation, arena matches):
    # each is one Prefect task holding its own engine; 1 = one task, as without a cluster
    shards: int = Field(1, ge=1, le=4096)
    ray: RayConfig = RayConfig()

    @property
    def sharded(self) -> bool:
        return self.shards > 1 or self.ray.address is not None
