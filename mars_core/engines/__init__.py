"""Engines: the text generators a policy plays and answers with, behind one interface.

- `base`: the `Engine` interface the game loop calls; `build`: the one place that builds an
  engine for a model spec; `hf`: the in-process transformers sampler; `scripted`: replies
  chosen by a function (tests, benches); `chat`: chat engines for the reasoning benchmarks;
- `vllm_server`, `vllm_client`, `vllm_pool`, `vllm_tls`: vLLM as a server in its own
  environment, its client, several replicas, TLS; `vllm_ext/`: files the server loads.

May import: config, models, run, types, vocab.
"""
