"""Checkpoint indexing: files written here by torch.save / safetensors, statistics checked
against the optimizer that produced them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.checkpoints import index_checkpoint, is_checkpoint
from forensics.store import open_store


class TinyGPT(nn.Module):
    """nanoGPT's shape in miniature: tied embedding/head, layer norm, a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(16, 8)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc(self.ln(self.wte(idx)))))


def _trained(steps: int = 3) -> tuple[TinyGPT, torch.optim.AdamW]:
    """A few real AdamW steps with nanoGPT's decay / no-decay groups (not model order)."""
    torch.manual_seed(0)
    model = TinyGPT()
    params = dict(model.named_parameters())
    groups = [
        {"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randint(0, 16, (4, 6))).logsumexp(-1).mean().backward()
        opt.step()
    return model, opt


def _check_stats(index, model: TinyGPT, opt: torch.optim.Optimizer) -> None:
    stats = {r["param"]: r for r in index.stats.to_dicts()}
    for name, param in model.named_parameters():
        state = opt.state[param]
        row = stats[name]
        assert row["numel"] == param.numel()
        assert row["param_norm"] == pytest.approx(param.detach().double().norm().item(), rel=1e-9)
        assert row["exp_avg_norm"] == pytest.approx(state["exp_avg"].double().norm().item())
        assert row["exp_avg_sq_mean"] == pytest.approx(state["exp_avg_sq"].double().mean().item())
        assert row["exp_avg_sq_max"] == pytest.approx(state["exp_avg_sq"].max().item())
        assert row["adam_step"] == float(state["step"])
    assert stats["head.weight"]["exp_avg_sq_mean"] == stats["wte.weight"]["exp_avg_sq_mean"]


def test_nanogpt_style_torch_checkpoint(tmp_path: Path) -> None:
    model, opt = _trained()
    path = tmp_path / "ckpt.pt"
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "model_args": {"n_layer": 1, "n_embd": 8},
            "iter_num": 3,
            "best_val_loss": torch.tensor(2.5),
            "config": {"lr": 1e-2},
        },
        path,
    )
    assert is_checkpoint(path)
    index = index_checkpoint(path)
    _check_stats(index, model, opt)
    row = index.row
    assert (row["step"], row["format"], row["has_optimizer"]) == (3, "torch", True)
    assert row["n_tensors"] == 6 and row["n_params"] == 16 * 8 + 8 + 8 + 64 + 8  # head tied
    assert row["model_config"] == {"n_layer": 1, "n_embd": 8}
    assert row["dtype"] == "float32" and row["reference_model"] is False
    assert index.warnings == []


def test_simulator_layout_nonfinite_and_reference_model(tmp_path: Path) -> None:
    model, opt = _trained()
    state = model.state_dict()
    state["fc.bias"][0], state["fc.bias"][1] = math.nan, math.inf
    path = tmp_path / "ckpt_000750.pt"
    torch.save(
        {
            "model": state,
            "optimizer": opt.state_dict(),
            "scaler": {"scale": 65536.0},
            "rng": {"torch": torch.get_rng_state(), "python": [1, 2]},
            "config": {"arch": "forensics-gpt", "n_layer": 1},
            "train_config": {"lr": 1e-2},
            "step": 750,
        },
        path,
    )
    index = index_checkpoint(path)
    assert index.row["step"] == 750 and index.row["reference_model"] is True
    bias = index.stats.filter(index.stats["param"] == "fc.bias").to_dicts()[0]
    assert (
        bias["nonfinite"] == 2 and math.isinf(bias["param_norm"]) or math.isnan(bias["param_norm"])
    )


def test_bare_state_dict_takes_its_step_from_the_name(tmp_path: Path) -> None:
    model, _ = _trained(1)
    path = tmp_path / "iter_0001000.pth"
    torch.save(model.state_dict(), path)
    index = index_checkpoint(path)
    assert index.row["step"] == 1000 and index.row["has_optimizer"] is False
    assert index.stats["exp_avg_norm"].null_count() == index.stats.height == 6
    torch.save(model.state_dict(), tmp_path / "gpt2-124M.pt")
    assert index_checkpoint(tmp_path / "gpt2-124M.pt").row["step"] is None


def test_safetensors_file_and_hf_checkpoint_folder(tmp_path: Path) -> None:
    model, opt = _trained()
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    single = tmp_path / "model_step_40.safetensors"
    save_file(tensors, str(single))
    index = index_checkpoint(single)
    assert (index.row["format"], index.row["step"], index.row["n_tensors"]) == (
        "safetensors",
        40,
        5,
    )

    folder = tmp_path / "out" / "checkpoint-1500"
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"))
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 8}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1500}))
    torch.save({"last_epoch": 3}, folder / "scheduler.pt")
    assert is_checkpoint(folder)
    index = index_checkpoint(folder)
    assert (index.row["format"], index.row["step"], index.row["has_optimizer"]) == (
        "hf-folder",
        1500,
        True,
    )
    assert index.row["model_config"] == {"model_type": "gpt2", "n_embd": 8}
    stats = {r["param"]: r for r in index.stats.to_dicts()}
    fc = opt.state[model.fc.weight]
    assert stats["fc.weight"]["exp_avg_sq_mean"] == pytest.approx(
        fc["exp_avg_sq"].double().mean().item()
    )


def test_what_counts_as_a_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    names = {
        "train.bin": False,
        "pytorch_model.bin": True,
        "pytorch_model-00001-of-00002.bin": True,
        "model.safetensors": True,
        "x.pth": True,
        "scheduler.pt": False,
        "rng_state_0.pth": False,
        "training_args.bin": False,
    }
    for name, expected in names.items():
        (data / name).write_bytes(b"\0\0")
        assert is_checkpoint(data / name) is expected, name
    run = tmp_path / "run"
    run.mkdir()
    save_file({"w": torch.zeros(2)}, str(run / "model.safetensors"))
    assert is_checkpoint(run)
    (run / "metrics.jsonl").write_text("{}\n")
    assert not is_checkpoint(run), "a run folder with logs is not one checkpoint"
    many = tmp_path / "checkpoint-9"
    many.mkdir()
    for step in (100, 200):
        save_file({"w": torch.zeros(2)}, str(many / f"model_{step}.safetensors"))
    assert not is_checkpoint(many), "two checkpoints side by side are two sources"
    sharded = tmp_path / "checkpoint-10"
    sharded.mkdir()
    for i in (1, 2):
        save_file({f"w{i}": torch.zeros(2)}, str(sharded / f"model-0000{i}-of-00002.safetensors"))
    assert is_checkpoint(sharded) and index_checkpoint(sharded).row["n_tensors"] == 2


@pytest.mark.parametrize("name", ["broken.pt", "broken.safetensors", "cut.pt"])
def test_unreadable_checkpoint_is_an_input_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name == "cut.pt":
        torch.save({"w": torch.zeros(100)}, path)
        path.write_bytes(path.read_bytes()[:200])
    else:
        path.write_bytes(b"this is not a checkpoint at all" * 4)
    with pytest.raises(InputError, match=name.replace(".", r"\.") + ".*expected"):
        index_checkpoint(path)


def test_code_in_a_pickle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "module.pt"
    torch.save(nn.Linear(2, 2), path)  # a whole module: unpickling would run code
    with pytest.raises(InputError, match="Unsupported global"):
        index_checkpoint(path)


def test_checkpoint_rows_through_the_store(tmp_path: Path, tmp_db: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "runx"
    writer = SummaryWriter(str(run / "tb"))
    writer.add_scalar("loss", 2.0, 1)
    writer.close()
    model, opt = _trained()
    (run / "ckpts").mkdir()
    torch.save(
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3},
        run / "ckpts" / "ckpt_000003.pt",
    )
    with open_store(tmp_db) as store:
        for _ in range(2):
            ingest(store, [run])
        rows = store.query("SELECT step, format, has_optimizer, n_params FROM checkpoints")
        assert rows.rows() == [(3, "torch", True, 216)]
        stats = store.query("SELECT count(*) AS n, count(exp_avg_norm) AS m FROM checkpoint_stats")
        assert stats.rows() == [(6, 6)]  # head.weight shares wte.weight's state
