"""Checkpoints name no class of this package, so moving a module never breaks loading an old one."""

import pickletools
import zipfile

import torch

from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
from zipformer_pc.training.checkpoint import RunningAverage, load_checkpoint, load_model_for_inference, save_checkpoint
from zipformer_pc.training.optim import Eden, make_optimizer


def pickled_globals(path) -> set:
    """``module name`` of every class or function a torch.save file refers to."""
    with zipfile.ZipFile(path) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    ops = list(pickletools.genops(data))
    found = set()
    for i, (op, arg, _) in enumerate(ops):
        if op.name == "GLOBAL":
            found.add(arg)
        elif op.name == "STACK_GLOBAL":
            found.add(f"{ops[i - 2][1]} {ops[i - 1][1]}")
    return found


def test_a_training_checkpoint_pickles_no_class_of_the_package(tmp_path):
    config = make_model_config("tiny", {}, HeadConfig(model_type="conditioned", vocab_size=20, decoder_dim=32,
                                                      joiner_dim=32))
    model = build_model(config)
    avg = RunningAverage(model)
    optimizer = make_optimizer("scaled_adam", model.parameters(), lr=0.045)
    scheduler = Eden(optimizer, 7500.0, 3.5, warmup_batches=5.0)
    feats = torch.randn(1, 60, 80)
    out = model(feats, torch.tensor([60]), [[3, 4]], [[5, 6, 7]], alpha=0.5)
    out["loss"].backward()
    scheduler.step_batch(1)
    optimizer.step()
    avg.step()
    # the keys train.py writes (Trainer.state)
    state = {"model": model.state_dict(), **avg.state_dict(), "model_config": config,
             "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "grad_scaler": {},
             "sampler": None, "cur_epoch": 1, "args": {"exp_dir": str(tmp_path)}, "batch_idx_train": 1}
    save_checkpoint(tmp_path / "epoch-1.pt", state)
    names = pickled_globals(tmp_path / "epoch-1.pt")
    assert names and not [n for n in names if n.startswith("zipformer_pc")], names
    assert load_checkpoint(tmp_path / "epoch-1.pt")["model_config"] == config
    loaded = load_model_for_inference(tmp_path, epoch=1, avg=1, use_averaged_model=False)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
