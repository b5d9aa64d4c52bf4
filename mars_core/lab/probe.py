"""The capacity probe: can a parametrization of the policy, shown a prompt layout, represent
the best response at all? Supervised, not RL: the policy is fitted by plain cross-entropy to
the best-response action of each of Kuhn Poker's 12 information states (against `bot:random`:
<BET> everywhere but J facing a bet, which folds), and the probe reports the steps and seconds
until every state prefers its best action, with the probability of <BET> per state on the way.

RL gets a far weaker signal than this supervision; a layout or parametrization that cannot fit
the answer when told it will not learn it from rewards. One step is one full batch: the 12
states x both actions, in one forward pass (the probabilities reported at a step are those
of the weights before its update), then one optimizer step on the best actions' tokens.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mars_core.lab import kuhn

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")  # the recipes' LoRA targets
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Arm:
    """One parametrization and prompt layout. `rank` 0 trains every weight."""

    name: str
    style: str = "compact"
    rank: int = 16
    targets: tuple[str, ...] = ATTENTION
    lr: float = 1e-4
    alpha: float = 32.0


# The arms `make lab` compares (docs/lab.md): the Kuhn recipes' adapter on both layouts, then
# on the compact layout the MLP added, a larger step, every weight trained, and the MLP with a
# step ten times the recipes'.
ARMS: tuple[Arm, ...] = (
    Arm("paper, LoRA r16 attention, lr 1e-4", style="paper"),
    Arm("compact, LoRA r16 attention, lr 1e-4"),
    Arm("compact, LoRA r16 attention+MLP, lr 1e-4", targets=ATTENTION + MLP),
    Arm("compact, LoRA r16 attention, lr 3e-4", lr=3e-4),
    Arm("compact, full fine-tuning, lr 1e-5", rank=0, lr=1e-5),
    Arm("compact, LoRA r16 attention+MLP, lr 1e-3", targets=ATTENTION + MLP, lr=1e-3),
)


@dataclass
class Item:
    """One information state as token ids: its prompt, and each action's answer tokens."""

    key: str
    prompt: list[int]
    answers: list[list[int]]  # per action of kuhn.ACTIONS
    label: int  # the best response's action


def items(tokenizer, style: str, policy: kuhn.Policy | None = None) -> list[Item]:
    """The 12 states in layout `style`, labelled by `policy` (the best response to random)."""
    from mars_core.games.registry import make_game
    from mars_core.rollout.play import PromptBuilder

    policy = policy or kuhn.best_response()
    adapter = make_game("kuhn_poker")
    builder = PromptBuilder(tokenizer, "answer", keep_history=False, style=style)
    answers = [tokenizer.encode(a + "</answer>", add_special_tokens=False) for a in kuhn.ACTIONS]
    out = []
    for info in kuhn.info_states():
        rules, obs = kuhn.prompt_texts(adapter, info, style)
        ids = builder.prompt_ids([{"role": "system", "content": rules},
                                  {"role": "user", "content": obs}])
        out.append(Item(info.key, ids, answers, int(policy[info.key] >= 0.5)))
    return out


@dataclass
class Curve:
    arm: dict
    prompt_tokens: float  # mean prompt length
    trainable: int  # trainable parameters
    steps: list[dict] = field(default_factory=list)  # per step: n_best, p_bet per state, s
    fit_step: int | None = None  # the first step at which all 12 states prefer the best action
    fit_seconds: float | None = None


def _sequence_logprobs(model, item_list: list[Item], pad_id: int, autocast: bool):
    """Log-probability of each (state, action) answer: a tensor [states, actions]. Sequences
    are padded on the left so that every answer ends at the last position, and the vocabulary
    projection runs only over the answers' positions (`logits_to_keep`)."""
    import torch

    seqs = [it.prompt + ans for it in item_list for ans in it.answers]
    lengths = [len(ans) for it in item_list for ans in it.answers]
    width, keep = max(len(s) for s in seqs), max(lengths) + 1
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s)
        mask[i, width - len(s):] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       logits_to_keep=keep).logits
    logp = torch.log_softmax(logits.float(), dim=-1)  # [seqs, keep, vocab]: positions -keep..-1
    out = []
    for i, n in enumerate(lengths):
        targets = ids[i, width - n:]
        # the logits at position t predict token t + 1: the answer's tokens from keep - 1 - n on
        out.append(logp[i, keep - 1 - n: keep - 1].gather(1, targets[:, None]).sum())
    return torch.stack(out).view(len(item_list), -1)


def fit(model_dir: str | Path, arm: Arm, steps: int = 40, seed: int = 0, bf16: bool = False,
        stop_at_fit: bool = True, on_step: Callable[[dict], None] | None = None,
        chunk: int = 4) -> Curve:
    """Fit `arm` to the best response for up to `steps` steps (stopping once every state
    prefers its best action, unless `stop_at_fit` is off); `chunk` states a forward pass."""
    import torch

    from mars_core.models.weights import load_model, load_tokenizer

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(model_dir)
    model = load_model(model_dir)
    if arm.rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=arm.rank, lora_alpha=arm.alpha,
                                                 target_modules=list(arm.targets)))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=arm.lr, weight_decay=0.0)
    batch = items(tokenizer, arm.style)
    labels = torch.tensor([it.label for it in batch])
    curve = Curve(asdict(arm), sum(len(it.prompt) for it in batch) / len(batch),
                  sum(p.numel() for p in params))
    start = time.perf_counter()
    for step in range(steps + 1):
        # the states in chunks of `chunk`, each chunk's gradient accumulated as it is computed
        # (the same step as one pass over the 12; the peak memory of one chunk)
        opt.zero_grad(set_to_none=True)
        parts = []
        for i in range(0, len(batch), chunk):
            lp = _sequence_logprobs(model, batch[i: i + chunk], tokenizer.pad_token_id, bf16)
            # cross-entropy on the best answers, averaged over the 12 states
            loss = -lp.gather(1, labels[i: i + chunk, None]).sum() / len(batch)
            loss.backward()
            parts.append(lp.detach())
        p_bet = torch.softmax(torch.cat(parts), dim=1)[:, 1]
        best = int(((p_bet >= 0.5).long() == labels).sum())
        row = {"step": step, "seconds": round(time.perf_counter() - start, 3), "n_best": best,
               "p_bet": {it.key: round(float(p), 4) for it, p in zip(batch, p_bet)}}
        curve.steps.append(row)
        if on_step is not None:
            on_step(row)
        if best == len(batch) and curve.fit_step is None:
            curve.fit_step, curve.fit_seconds = step, row["seconds"]
            if stop_at_fit:
                break
        if step == steps:
            break
        opt.step()
    return curve
