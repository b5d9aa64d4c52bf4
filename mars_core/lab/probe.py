"""The capacity probe: can a parametrization of the policy, shown a prompt layout, represent
the best response at all? Supervised, not RL: the policy is fitted by plain cross-entropy to
the best-response action of each of Kuhn Poker's 12 information states (against `bot:random`:
<BET> everywhere but J facing a bet, which folds), and the probe reports the steps and seconds
until every state prefers its best action, with the probability of <BET> per state on the way.
With `Arm.game` "tic_tac_toe" the states are 24 positions where some legal move is not
optimal, labelled by minimax (`lab.tictactoe`; the loss: -log of the optimal moves'
probability together, any optimal move being right).

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

from mars_core.lab import kuhn, tictactoe

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
    game: str = "kuhn_poker"  # or "tic_tac_toe"


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


GAMES = ("kuhn_poker", "tic_tac_toe")
TTT_POSITIONS = 24  # the Tic-Tac-Toe positions the probe fits


@dataclass
class Item:
    """One state as token ids: its prompt, and each legal action's answer tokens."""

    key: str
    prompt: list[int]
    answers: list[list[int]]  # per legal action (Kuhn: kuhn.ACTIONS)
    best: tuple[int, ...]  # the best actions (indices into answers)

    @property
    def label(self) -> int:
        return self.best[0]


def items(tokenizer, style: str, policy: kuhn.Policy | None = None,
          game: str = "kuhn_poker", held_out: int = 0,
          positions: int = TTT_POSITIONS) -> list[Item]:
    """The probe's states in layout `style`: Kuhn's 12 labelled by `policy` (the best response
    to random), or `positions` decisive Tic-Tac-Toe positions labelled by minimax (with
    `held_out` > 0: that many other decisive positions instead, the ones the probe measures
    and does not fit)."""
    from mars_core.games.registry import make_game
    from mars_core.rollout.play import PromptBuilder

    if game not in GAMES:
        raise ValueError(f"the probe has no game {game!r}; choose one of: {', '.join(GAMES)}")
    adapter = make_game(game)
    builder = PromptBuilder(tokenizer, "answer", keep_history=False, style=style)

    def encode(answer: str) -> list[int]:
        return tokenizer.encode(answer + "</answer>", add_special_tokens=False)

    out = []
    if game == "tic_tac_toe":
        fitted = tictactoe.decisive_positions(positions)
        for board, mark in (tictactoe.held_out_positions(held_out, fitted) if held_out
                            else fitted):
            state, player = adapter.new_state(0), adapter.MARKS.index(mark)
            for m, cell in tictactoe.moves_to(board):
                adapter.apply(state, adapter.legal_actions(state)[f"<{m}({cell // 3},{cell % 3})>"])
            legal = sorted(adapter.legal_actions(state), key=tictactoe.move_cell)
            best = tictactoe.optimal_moves(board, mark)
            ids = builder.prompt_ids([
                {"role": "system", "content": adapter.rules_for(player, style)},
                {"role": "user", "content": adapter.observation_for(state, player, [], style)}])
            out.append(Item(f"{board}:{mark}", ids, [encode(a) for a in legal],
                            tuple(i for i, a in enumerate(legal)
                                  if tictactoe.move_cell(a) in best)))
        return out
    if held_out:
        raise ValueError("held-out states are Tic-Tac-Toe's: Kuhn Poker's 12 are all fitted")
    if positions != TTT_POSITIONS:
        raise ValueError("a number of positions is Tic-Tac-Toe's: Kuhn Poker has 12 states")
    policy = policy or kuhn.best_response()
    answers = [encode(a) for a in kuhn.ACTIONS]
    for info in kuhn.info_states():
        rules, obs = kuhn.prompt_texts(adapter, info, style)
        ids = builder.prompt_ids([{"role": "system", "content": rules},
                                  {"role": "user", "content": obs}])
        out.append(Item(info.key, ids, answers, (int(policy[info.key] >= 0.5),)))
    return out


@dataclass
class Curve:
    arm: dict
    prompt_tokens: float  # mean prompt length
    trainable: int  # trainable parameters
    states: int = 12  # how many states the probe fits
    # per step: n_best, p_best per state (the best actions' probability), Kuhn's p_bet, s
    steps: list[dict] = field(default_factory=list)
    fit_step: int | None = None  # the first step at which every state prefers a best action
    fit_seconds: float | None = None
    held_out: int = 0  # Tic-Tac-Toe positions measured at each step and never fitted


def _sequence_logprobs(model, item_list: list[Item], pad_id: int, autocast: bool):
    """Log-probability of each (state, action) answer: a tensor [states, most actions], -inf
    where a state has fewer actions. Sequences are padded on the left so that every answer ends
    at the last position, and the vocabulary projection runs only over the answers' positions
    (`logits_to_keep`)."""
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
    most = max(len(it.answers) for it in item_list)
    rows, at = [], 0
    for it in item_list:
        row = torch.stack(out[at: at + len(it.answers)])
        at += len(it.answers)
        rows.append(torch.cat([row, row.new_full((most - len(row),), float("-inf"))]))
    return torch.stack(rows)


def _best_stats(probs, part: list[Item]) -> tuple[list[float], int]:
    """Per state of `part` (rows of `probs`, its answers' probabilities): the best answers'
    probability together, and how many states prefer a best answer."""
    p_best = [float(probs[j, list(it.best)].sum()) for j, it in enumerate(part)]
    return p_best, sum(int(probs[j].argmax()) in it.best for j, it in enumerate(part))


def _measure(model, item_list: list[Item], pad_id: int, autocast: bool, chunk: int) -> dict:
    """Without a gradient: how many of `item_list` prefer a best answer, the best answers'
    mean probability, and a uniform answer's chance of being best (the floor)."""
    import torch

    hits, p_best = 0, []
    with torch.no_grad():
        for i in range(0, len(item_list), chunk):
            part = item_list[i: i + chunk]
            probs = torch.softmax(_sequence_logprobs(model, part, pad_id, autocast), dim=1)
            p, n = _best_stats(probs, part)
            p_best += p
            hits += n
    chance = sum(len(it.best) / len(it.answers) for it in item_list) / len(item_list)
    return {"n_best": hits, "p_best_mean": round(sum(p_best) / len(p_best), 4),
            "chance": round(chance, 4)}


def fit(model_dir: str | Path, arm: Arm, steps: int = 40, seed: int = 0, bf16: bool = False,
        stop_at_fit: bool = True, on_step: Callable[[dict], None] | None = None,
        chunk: int = 4, held_out: int = 0, positions: int = TTT_POSITIONS) -> Curve:
    """Fit `arm` to the best response for up to `steps` steps (stopping once every state
    prefers its best action, unless `stop_at_fit` is off); `chunk` states a forward pass. With
    `held_out` (Tic-Tac-Toe) each step also measures that many positions it does not fit (each
    row's `held_out`: how many prefer an optimal move, their optimal moves' mean probability,
    and a uniform move's): whether what is fitted carries over to positions never seen;
    `positions`: how many Tic-Tac-Toe positions it fits."""
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
    batch = items(tokenizer, arm.style, game=arm.game, positions=positions)
    unseen = (items(tokenizer, arm.style, game=arm.game, held_out=held_out, positions=positions)
              if held_out else [])
    curve = Curve(asdict(arm), sum(len(it.prompt) for it in batch) / len(batch),
                  sum(p.numel() for p in params), states=len(batch), held_out=len(unseen))
    start = time.perf_counter()
    for step in range(steps + 1):
        # the states in chunks of `chunk`, each chunk's gradient accumulated as it is computed
        # (the same step as one pass over them all; the peak memory of one chunk)
        opt.zero_grad(set_to_none=True)
        p_best, hits, p_bet = [], 0, []
        for i in range(0, len(batch), chunk):
            part = batch[i: i + chunk]
            lp = _sequence_logprobs(model, part, tokenizer.pad_token_id, bf16)
            # cross-entropy on the best answers (together), averaged over the states
            best = [lp[j, list(it.best)].logsumexp(0) for j, it in enumerate(part)]
            loss = -torch.stack(best).sum() / len(batch)
            loss.backward()
            probs = torch.softmax(lp.detach(), dim=1)
            p, n = _best_stats(probs, part)
            p_best += p
            hits += n
            if arm.game == "kuhn_poker":
                p_bet += [float(probs[j, 1]) for j in range(len(part))]
        row = {"step": step, "seconds": round(time.perf_counter() - start, 3), "n_best": hits,
               "p_best": {it.key: round(p, 4) for it, p in zip(batch, p_best)}}
        if p_bet:
            row["p_bet"] = {it.key: round(p, 4) for it, p in zip(batch, p_bet)}
        if unseen:
            row["held_out"] = _measure(model, unseen, tokenizer.pad_token_id, bf16, chunk)
        curve.steps.append(row)
        if on_step is not None:
            on_step(row)
        if hits == len(batch) and curve.fit_step is None:
            curve.fit_step, curve.fit_seconds = step, row["seconds"]
            if stop_at_fit:
                break
        if step == steps:
            break
        opt.step()
    return curve
