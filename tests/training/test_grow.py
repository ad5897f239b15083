"""zipformer_pc.training.grow: a trained encoder made deeper, starting near the model it grew from."""

import dataclasses

import pytest
import torch

from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
from zipformer_pc.model.zipformer import EncoderConfig
from zipformer_pc.training.grow import grown_weights, main


def _trained(tmp_path):
    """A tiny conditioned model with non-default weights (as if trained), saved as a shipped .pt is."""
    torch.manual_seed(0)
    config = make_model_config("tiny", {"dropout": 0.0}, HeadConfig(model_type="conditioned", vocab_size=30))
    model = build_model(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    path = tmp_path / "conditioned.pt"
    torch.save({"model": {k: v.half() for k, v in model.state_dict().items()}, "model_config": config}, path)
    return model.eval(), config, path


def _encode(model, feats):
    with torch.no_grad():
        out, _ = model.encoder(feats, torch.tensor([feats.size(1)]))
    return out


def test_the_grown_model_loads_whole_and_starts_near_the_trained_one(tmp_path):
    trained, config, path = _trained(tmp_path)
    out = tmp_path / "grown.pt"
    assert main(["--from", str(path), "--num-encoder-layers", "2,2,2,2,2,2", "--out", str(out)]) == 0
    grown = torch.load(out, weights_only=False)
    assert grown["model_config"]["encoder"]["num_encoder_layers"] == "2,2,2,2,2,2"
    assert grown["model_config"]["head"] == config["head"] and grown["grown_from"] == str(path)
    deep = build_model(grown["model_config"])
    deep.load_state_dict(grown["model"], strict=True)  # every tensor of the deeper model is there
    sd = grown["model"]
    for stack in range(6):
        first, new = f"encoder.stacks.{stack}.layers.0.", f"encoder.stacks.{stack}.layers.1."
        for k in [k for k in sd if k.startswith(first)]:
            twin = new + k[len(first):]
            if k.endswith(("bypass_mid.scale", "bypass.scale")):
                assert torch.all(sd[twin] == 0.2)  # the new layer adds only a fifth of its change
            else:
                assert torch.equal(sd[twin], sd[k])  # a copy of the trained layer
    # the trained weights are kept (fp16 -> fp32)
    shipped = torch.load(path, weights_only=False)["model"]
    assert all(torch.equal(sd[k], v.float()) for k, v in shipped.items())
    # near the trained model: much nearer than the same deeper model freshly initialised
    feats = torch.randn(1, 120, 80)
    ref = _encode(trained.half().float(), feats)
    fresh = build_model(grown["model_config"]).eval()
    near = (_encode(deep.eval(), feats) - ref).norm() / ref.norm()
    far = (_encode(fresh, feats) - ref).norm() / ref.norm()
    assert near < 0.5 * far, (near, far)


def test_only_depth_grows(tmp_path):
    _, config, path = _trained(tmp_path)
    out = tmp_path / "x.pt"
    assert main(["--from", str(path), "--num-encoder-layers", "2,2", "--out", str(out)]) == 2  # 2 stacks, not 6
    assert main(["--from", str(path), "--num-encoder-layers", "0,1,1,1,1,1", "--out", str(out)]) == 2
    assert main(["--from", str(tmp_path / "none.pt"), "--num-encoder-layers", "2,2,2,2,2,2", "--out", str(out)]) == 2
    assert not out.exists()
    old = EncoderConfig(**config["encoder"])
    with pytest.raises(ValueError, match="more than depth"):
        grown_weights({}, old, dataclasses.replace(old, encoder_dim="128,128,192,192,192,192"))
