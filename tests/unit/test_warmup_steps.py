"""The format warm-up's steps (mars_core.training.warmup.sft_steps) on a tiny random model:
gradient accumulation and recomputed activations take the same steps as the whole batch."""
import copy

import pytest
import torch

from mars_core.models.weights import load_model
from tests.unit.test_trainer import _samples


@pytest.fixture
def model(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)


@pytest.mark.parametrize("micro", [1, 3])
def test_warmup_micro_batches_take_the_same_steps(model, micro):
    """The format warm-up's gradient accumulation (`warmup.micro_batch_size`): the same losses
    and the same weights as the whole batch at once, only a smaller peak."""
    from mars_core.training.warmup import sft_steps

    examples = [(list(s.prompt_ids), list(s.completion_ids)) for s in _samples(8)]
    runs = {}
    rows = {None: [], micro: []}
    for m in (None, micro):
        copy_ = copy.deepcopy(model)
        copy_.register_forward_pre_hook(
            lambda mod, args, kwargs, m=m: rows[m].append(len(kwargs["input_ids"])),
            with_kwargs=True)
        losses = sft_steps(copy_, examples, steps=3, batch_size=8, lr=1e-3, pad_id=0, seed=0,
                           progress=False, micro_batch_size=m)
        runs[m] = losses, dict(copy_.named_parameters())
    assert max(rows[micro]) == micro and sum(rows[micro]) == sum(rows[None]) == 3 * 8
    (whole, w1), (parts, w2) = runs[None], runs[micro]
    assert whole == pytest.approx(parts, rel=1e-4) and whole[0] > whole[-1]
    for name, p in w1.items():
        assert torch.allclose(p, w2[name], atol=1e-5, rtol=1e-4), name


def test_the_warmup_with_gradient_checkpointing_takes_the_same_steps(model):
    """`warmup.gradient_checkpointing`: the activations recomputed in backward, the same losses
    and weights; switched off again after, for the games the model plays next."""
    from mars_core.models.prefix import _checkpointing as uses_gradient_checkpointing
    from mars_core.models.prefix import gradient_checkpointing
    from mars_core.training.warmup import sft_steps

    examples = [(list(s.prompt_ids), list(s.completion_ids)) for s in _samples(4)]
    runs = {}
    for on in (False, True):
        copy_ = copy.deepcopy(model)
        with gradient_checkpointing(copy_, on):
            assert uses_gradient_checkpointing(copy_) == on
            losses = sft_steps(copy_, examples, steps=2, batch_size=4, lr=1e-3, pad_id=0,
                               seed=0, progress=False, micro_batch_size=2)
        assert not uses_gradient_checkpointing(copy_)
        runs[on] = losses, dict(copy_.named_parameters())
    (plain, w1), (recomputed, w2) = runs[False], runs[True]
    assert plain == pytest.approx(recomputed, rel=1e-5)
    for name, p in w1.items():
        assert torch.allclose(p, w2[name], atol=1e-6, rtol=1e-5), name
