"""The reference model: shapes, per-token loss, recorded stats, stabilisers, presets."""

from __future__ import annotations

import pytest
import torch

from forensics.sim.model import GPT, GPTConfig, Linear, preset


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(preset("tiny", n_embd=32, n_head=2, **kw))


def batch(V: int = 512, B: int = 2, T: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def test_forward_shapes_and_per_token_loss() -> None:
    model = tiny()
    x, y = batch()
    logits, loss = model(x, y)
    _, per_token = model(x, y, reduction="none")
    assert logits.shape == (2, 16, 512) and loss is not None and per_token is not None
    assert per_token.shape == (2, 16)
    assert torch.allclose(per_token.mean(), loss)
    assert model(x)[1] is None


def test_record_mode_matches_sdpa_and_fills_stats() -> None:
    model = tiny()
    x, y = batch()
    _, plain = model(x, y)
    _, recorded = model(x, y, record=True)
    assert plain is not None and recorded is not None
    assert torch.allclose(plain, recorded, atol=1e-5)
    assert len(model.stats["act_norm"]) == len(model.stats["max_attn_logit"]) == 2
    assert all(v > 0 for v in model.stats["act_norm"])


@pytest.mark.parametrize(
    "option", [{"qk_norm": True}, {"z_loss": 1e-4}, {"post_norm": True}, {"attn_softcap": 30.0}]
)
def test_stabilisers_run(option: dict) -> None:
    model = tiny(**option)
    x, y = batch()
    _, loss = model(x, y)
    assert loss is not None and torch.isfinite(loss)
    loss.backward()


def test_config_round_trip_and_arch() -> None:
    cfg = preset("tiny", qk_norm=True)
    data = cfg.to_dict()
    assert data["arch"] == "forensics-gpt"
    assert GPTConfig.from_dict(data) == cfg


def test_preset_sizes() -> None:
    assert 100_000 < GPT(preset("tiny")).num_params() < 500_000
    with torch.device("meta"):
        small = GPT(preset("small")).num_params()
    assert 40e6 < small < 60e6


def test_asserts_name_the_problem() -> None:
    with pytest.raises(AssertionError, match="divisible by n_head"):
        GPTConfig(n_embd=30, n_head=4)
    with pytest.raises(AssertionError, match="block_size"):
        tiny()(torch.zeros(1, 65, dtype=torch.long))


def test_cpu_fp16_linear_overflows_like_a_gpu() -> None:
    lin = Linear(4, 1).half()
    with torch.no_grad():
        lin.weight.fill_(1.0)
    out = lin(torch.full((1, 4), 20000.0, dtype=torch.float16))
    assert out.dtype == torch.float16 and torch.isinf(out).all()
