"""Batch-invariant mode (`model.batch_invariant`, mars_core.models.invariant): one game's sampled
reply, tokens and log-probs, the same bits whatever other games share its batch, with the
embedded model in bf16 (the precision in which the plain batched engine differs) and in fp32."""
import pytest
import torch

from mars_core.engines.hf import HFEngine
from mars_core.models.invariant import NAME, first_turn, make_batch_invariant, unsupported
from mars_core.types import SamplingParams

RULES = ("Kuhn poker, you are player {seat}. Cards J < Q < K; each player antes 1 chip. "
         "<PASS> checks, or folds to a bet. <BET> bets 1 chip, or calls a bet.")
ASKS = ["Bets: none\nLegal: <PASS> <BET>\nYour card: K", "Bets: opp <PASS>\nYour card: Q",
        "Bets: opp <BET>\nLegal: <PASS> <BET>\nYour card: J, and the pot holds three chips",
        "Your card: Q"]


@pytest.fixture(scope="module")
def prompts(tokenizer):
    chats = [[{"role": "system", "content": RULES.format(seat=seat)},
              {"role": "user", "content": ask}] for seat in (0, 1) for ask in ASKS]
    rows = [list(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                               return_dict=False)) for c in chats]
    return rows + [tokenizer.encode("A prompt with no turns: answer <BET> or <PASS>.")]


@pytest.fixture(scope="module")
def embedded(embedded_dir):
    from mars_core.models.weights import load_model

    return load_model(embedded_dir, dtype=torch.float32)


def params(n=6):
    return SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=n, seed=11)


def same(a, b, bf16: bool) -> bool:
    """bf16: the same bits. fp32: the same tokens, the log-probs to float precision (fp32
    matrix products take another kernel for another row count: not bitwise, docs/gpu.md)."""
    if bf16:
        return a == b
    return [c.token_ids for c in a] == [c.token_ids for c in b] and all(
        abs(x - y) < 1e-4 for c, d in zip(a, b) for x, y in zip(c.logprobs, d.logprobs))


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
@pytest.mark.parametrize("bf16", [True, False], ids=["bf16", "fp32"])
def test_a_reply_does_not_depend_on_its_batch(embedded, tokenizer, prompts, bf16):
    from mars_core.models.prefix import PrefixCache

    engine = HFEngine(embedded, tokenizer, batch_size=len(prompts), autocast_bf16=bf16,
                      batch_invariant=True)
    together = engine.generate(prompts, params())
    engine.batch_size = 3  # other neighbours, rows dropping out at other steps
    assert same(engine.generate(prompts, params()), together, bf16)
    engine.batch_size = 1  # each alone (a fresh prefix cache: each prefix computed again)
    engine.prefix_cache = PrefixCache()
    assert same(engine.generate(prompts, params()), together, bf16)
    # and when the other games of its call are other games (its index and seed kept)
    engine.batch_size = len(prompts)
    others = [p[:len(p) // 2 + 3] for p in prompts[1:]]
    assert same(engine.generate([prompts[0]] + others, params())[:1], together[:1], bf16)
    # outside its calls the model runs the plain attention (a warm-up trains it in place)
    assert embedded.config._attn_implementation != NAME


def test_the_invariant_model_computes_the_same_function(embedded_dir, prompts):
    """Row attention and the one-row products change the order of sums, not what is summed:
    in fp32 the logits agree with the plain model's to float precision."""
    from mars_core.models.prefix import batch_forward
    from mars_core.models.weights import load_model

    plain = load_model(embedded_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        want = batch_forward(plain, prompts, 0, logits_to_keep=1, share_prefix=False).logits
        invariant = make_batch_invariant(load_model(embedded_dir, dtype=torch.float32).eval())
        got = batch_forward(invariant, prompts, 0, logits_to_keep=1, share_prefix=False).logits
    assert torch.allclose(got, want, atol=2e-3, rtol=0)


def test_a_rows_prefix_is_its_first_turn(tokenizer, prompts):
    end = {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    n = first_turn(prompts[0], end)
    assert tokenizer.decode(prompts[0][:n]).endswith(RULES.format(seat=0) + "<|im_end|>")
    assert first_turn(prompts[0], end) == first_turn(prompts[1], end)  # the seat's rules
    assert first_turn(prompts[-1], end) == 0  # no turn: computed whole
    assert first_turn([5, 2], {2}) == 0  # an end token as the last: nothing left of its own


def test_a_one_row_product_runs_on_two_rows():
    torch.manual_seed(0)
    layer = torch.nn.Linear(1536, 8)
    model = torch.nn.Sequential(layer)
    model.config = None
    model.set_attn_implementation = lambda name: None
    make_batch_invariant(model)
    x = torch.randn(3, 1536)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(model(x[:1]), model(x)[:1])
        assert model(x[:1]).shape == (1, 8)


def test_sliding_window_models_are_refused_by_name():
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                        sliding_window=8)
    model = MistralForCausalLM(cfg)
    assert "sliding-window" in unsupported(model)
    with pytest.raises(ValueError, match="sliding-window"):
        make_batch_invariant(model)


def test_the_vllm_servers_get_batch_invariance_where_the_device_has_it(monkeypatch):
    from mars_core.config import load_config
    from mars_core.engines.vllm_server import batch_invariant_env, server_env

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    env, why = batch_invariant_env("auto")
    assert env == {} and "no GPU here" in why
    assert batch_invariant_env("on") == ({"VLLM_BATCH_INVARIANT": "1"}, None)
    assert batch_invariant_env("off") == ({}, None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "an old GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (7, 5))
    monkeypatch.setattr(torch.version, "hip", None)
    assert "an old GPU is not among" in batch_invariant_env("auto")[1]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0))
    assert batch_invariant_env("auto") == ({"VLLM_BATCH_INVARIANT": "1"}, None)
    cfg = load_config("configs/smoke.yaml", ["engine.vllm.launch.env={VLLM_BATCH_INVARIANT: '0'}"])
    launch = cfg.engine.vllm.launch
    assert server_env(launch.batch_invariant, launch.env) == {"VLLM_BATCH_INVARIANT": "0"}


@pytest.mark.parametrize("engine,bf16,setting,says", [
    ("hf", True, "auto", "byte for byte at any shard layout"),
    ("hf", True, "off", "only in distribution"),
    ("hf", False, "auto", "the same tokens but where a draw"),
    ("vllm", True, "on", "in distribution only")])
def test_mars_check_says_what_reproduces(engine, bf16, setting, says):
    from cli.plan import reproducible_line

    line = reproducible_line(engine, "on" if bf16 else "off", setting)
    assert line.startswith("reproducible: ") and says in line


def test_a_product_on_many_rows_runs_in_pieces_of_two_to_32_rows(monkeypatch):
    """Inside the engine's calls, where the machine's products depend on their row count, more
    than 32 rows run in pieces of 2 to 32 rows (never one), and the result keeps its shape."""
    from mars_core.models import invariant

    seen = []

    def plain(x):
        seen.append(x.shape[0] if x.dim() == 2 else x.shape[-2])
        return x @ torch.ones(x.shape[-1], 3)

    monkeypatch.setattr(invariant, "_rows_vary", lambda x: True)
    x = torch.randn(5, 13, 4)  # 65 rows
    assert torch.equal(invariant._invariant_linear(plain, x), plain(x))  # outside: one call
    monkeypatch.setattr(invariant, "_chunking", 1)
    seen.clear()
    out = invariant._invariant_linear(plain, x)
    assert seen == [32, 31, 2] and out.shape == (5, 13, 3)
    assert torch.allclose(out, x @ torch.ones(4, 3))
    seen.clear()
    invariant._invariant_linear(plain, torch.randn(1, 1, 4))  # one row: run as two
    assert seen == [2]
