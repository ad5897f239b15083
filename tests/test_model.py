"""Transducer heads, the alpha-weighted loss and checkpoint averaging (fast units)."""

import pytest
import torch

from zipformer_pc.checkpoint import average_between, average_state_dicts, update_averaged_model
from zipformer_pc.decoder import MODE_N, MODE_P, Decoder
from zipformer_pc.loss import LossConfig
from zipformer_pc.model import HeadConfig, Transducer, build_model, make_model_config

VOCAB = 40


def small_model(model_type: str, seed: int = 0) -> Transducer:
    torch.manual_seed(seed)
    head = HeadConfig(model_type=model_type, vocab_size=VOCAB, decoder_dim=64, joiner_dim=64, mode_dim=8)
    cfg = make_model_config(
        "tiny",
        {"encoder_dim": "64", "feedforward_dim": "128", "num_heads": "2", "encoder_unmasked_dim": "64",
         "num_encoder_layers": "1,1,1,1,1,1"},
        head,
    )
    return build_model(cfg)


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(3, 200, 80, generator=g)
    lens = torch.tensor([200, 170, 120])
    tokens_n = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    tokens_p = [[3, 4, 5, 12], None, [8, 9, 10, 11, 13]]
    return feats, lens, tokens_n, tokens_p


def test_decoder_shapes_and_padding():
    d = Decoder(VOCAB, 32, context_size=2)
    y = torch.tensor([[0, 5, 6, -1], [0, 7, -1, -1]])
    out = d(y)
    assert out.shape == (2, 4, 32)
    # decoding: exactly context_size tokens, no padding
    assert d(torch.tensor([[5, 6]]), need_pad=False).shape == (1, 1, 32)


@pytest.mark.parametrize("mode_dim,context_size", [(0, 2), (8, 2), (8, 3), (0, 1)])
def test_training_contexts_are_the_ones_decoding_builds(mode_dim, context_size):
    """Training output u must equal the decode-time output for the same history.

    Decoders (ours, sherpa-onnx) start from ``[blank] * context_size`` and shift
    each emitted token in; the training-time padding must give the same first
    context, mode embedding included.
    """
    torch.manual_seed(0)
    d = Decoder(VOCAB, 32, context_size=context_size, mode_dim=mode_dim)
    tokens = [5, 6, 7, 8]
    y = torch.tensor([[0, *tokens]])  # blank-prefixed, as the model feeds it
    for mode in ((MODE_N, MODE_P) if mode_dim else (None,)):
        train_out = d(y, mode)
        for u in range(y.size(1)):
            ctx = ([0] * context_size + tokens[:u])[-context_size:]
            dec_out = d(torch.tensor([ctx]), mode, need_pad=False)[:, -1]
            assert torch.allclose(train_out[:, u], dec_out, atol=1e-6), (mode, u)


def test_conditioned_decoder_depends_on_mode_and_requires_it():
    torch.manual_seed(0)
    d = Decoder(VOCAB, 32, mode_dim=8)
    y = torch.tensor([[0, 5, 6]])
    with pytest.raises(ValueError):
        d(y)
    assert not torch.allclose(d(y, MODE_N), d(y, MODE_P))
    # the mode can be given per utterance
    both = d(torch.cat([y, y]), torch.tensor([MODE_N, MODE_P]))
    assert torch.allclose(both[0], d(y, MODE_N)[0]) and torch.allclose(both[1], d(y, MODE_P)[0])


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
def test_loss_is_alpha_weighted_per_utterance_mean(alpha):
    m = small_model("conditioned")
    m.eval()
    feats, lens, tn, tp = batch()
    out = m(feats, lens, tn, tp, alpha=alpha)
    assert int(out["num_n"]) == 3 and int(out["num_p"]) == 2
    expected = (1 - alpha) * out["loss_n"] + alpha * out["loss_p"]
    assert torch.allclose(out["loss"], expected)
    # loss_n is the mean over the utterances: summed loss / 3
    enc, enc_lens = m.encoder(feats, lens)
    total = m.forward_head(enc, enc_lens, tn, MODE_N, LossConfig())
    assert torch.allclose(out["loss_n"], total / 3, rtol=1e-5)


def test_batch_without_p_is_well_defined():
    m = small_model("conditioned")
    feats, lens, tn, _ = batch()
    out = m(feats, lens, tn, [None, None, None], alpha=0.5)
    assert int(out["num_p"]) == 0 and float(out["loss_p"]) == 0.0
    assert torch.isfinite(out["loss"])
    assert torch.allclose(out["loss"], 0.5 * out["loss_n"])
    out["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_both_mode_embeddings_receive_gradient():
    m = small_model("conditioned")
    feats, lens, tn, tp = batch()
    m(feats, lens, tn, tp, alpha=0.5)["loss"].backward()
    g = m.decoders["main"].mode_embedding.weight.grad
    assert g is not None
    assert (g.abs().sum(dim=1) > 0).all(), "each mode vector (N and P) must be trained"


def test_single_head_types_use_one_reference():
    feats, lens, tn, tp = batch()
    punct = small_model("punct")(feats, lens, tn, tp, alpha=0.5)
    assert int(punct["num_n"]) == 0 and int(punct["num_p"]) == 2
    assert torch.allclose(punct["loss"], punct["loss_p"])  # alpha does not apply
    norm = small_model("norm")(feats, lens, tn, tp, alpha=0.5)
    assert int(norm["num_p"]) == 0 and int(norm["num_n"]) == 3
    assert torch.allclose(norm["loss"], norm["loss_n"])


def test_two_decoder_heads_are_separate():
    m = small_model("two-decoder")
    assert set(m.decoders) == {"N", "P"} and set(m.joiners) == {"N", "P"}
    feats, lens, tn, tp = batch()
    # alpha = 1: only the P head (and the shared encoder) learn
    m(feats, lens, tn, tp, alpha=1.0)["loss"].backward()
    assert m.decoders["N"].embedding.weight.grad is None or m.decoders["N"].embedding.weight.grad.abs().sum() == 0
    assert m.decoders["P"].embedding.weight.grad.abs().sum() > 0


def test_bad_alpha_and_model_type_are_rejected():
    m = small_model("conditioned")
    feats, lens, tn, tp = batch()
    with pytest.raises(ValueError):
        m(feats, lens, tn, tp, alpha=1.5)
    with pytest.raises(ValueError):
        HeadConfig(model_type="three-decoder")


def test_conditioned_has_fewer_parameters_than_two_decoder():
    n = {t: sum(p.numel() for p in small_model(t).parameters()) for t in ("conditioned", "two-decoder")}
    assert n["conditioned"] < n["two-decoder"]


# ---------------------------------------------------------------- averaging


def test_average_between_recovers_the_mean_of_the_interval():
    # weights w_1..w_6 at batches 1..6; running averages at batches 2 and 6
    ws = [torch.tensor([float(i), 2.0 * i]) for i in range(1, 7)]
    avg2 = sum(ws[:2]) / 2
    avg6 = sum(ws) / 6
    start = {"batch_idx_train": 2, "model_avg": {"w": avg2}}
    end = {"batch_idx_train": 6, "model_avg": {"w": avg6}}
    got = average_between(start, end)["w"]
    assert torch.allclose(got, sum(ws[2:]) / 4)
    with pytest.raises(ValueError):
        average_between(end, start)


def test_running_average_update_matches_the_mean():
    model = torch.nn.Linear(2, 1, bias=False)
    avg = torch.nn.Linear(2, 1, bias=False).double()
    seen = []
    for b in range(1, 9):
        with torch.no_grad():
            model.weight.fill_(float(b))
        if b % 2 == 0:  # average_period = 2
            seen.append(float(b))
            update_averaged_model(avg, model, b, 2)
    # with period 2 the average weights each snapshot by the batches it stands for
    assert torch.allclose(avg.weight, torch.full_like(avg.weight, sum(seen) / len(seen)))


def test_average_state_dicts():
    s = average_state_dicts([{"a": torch.tensor([1.0]), "n": torch.tensor(3)}, {"a": torch.tensor([3.0]), "n": torch.tensor(5)}])
    assert float(s["a"]) == 2.0 and int(s["n"]) == 5


class _CountingDecoder(torch.nn.Module):
    """Predictor stub: its output is the last token of the context."""

    conditioned = False

    def forward(self, contexts, mode=None, need_pad=True):
        return contexts[:, -1:].float().unsqueeze(-1)


class _CountingJoiner(torch.nn.Module):
    """Joiner stub: after token k (k < 3) it predicts token k + 1, then blank."""

    def encoder_proj(self, x):
        return x[..., :1]

    def decoder_proj(self, x):
        return x

    def forward(self, enc, dec, project_input=True):
        nxt = (dec[..., 0] + 1).long()
        nxt = torch.where(nxt > 3, torch.zeros_like(nxt), nxt)
        return torch.nn.functional.one_hot(nxt, 5).float()


class _StubModel:
    cfg = HeadConfig(model_type="punct", vocab_size=5)

    def __init__(self):
        self.decoders = {"main": _CountingDecoder()}
        self.joiners = {"main": _CountingJoiner()}

    def head_for(self, mode):
        return "main"


@pytest.mark.parametrize("max_sym,expected", [(1, [[1, 2], [1], []]), (2, [[1, 2, 3], [1, 2], []]),
                                              (4, [[1, 2, 3], [1, 2, 3], []])])
def test_greedy_search_emits_up_to_max_sym_per_frame(max_sym, expected):
    from zipformer_pc.beam_search import greedy_search_batch

    enc = torch.zeros(3, 2, 4)
    lens = torch.tensor([2, 1, 0])  # the third utterance has no frame: nothing may be emitted
    assert greedy_search_batch(_StubModel(), enc, lens, MODE_P, max_sym_per_frame=max_sym) == expected
    with pytest.raises(ValueError):
        greedy_search_batch(_StubModel(), enc, lens, MODE_P, max_sym_per_frame=0)


def _save(model: Transducer, path):
    from zipformer_pc.checkpoint import save_checkpoint

    save_checkpoint(path, {"model": model.state_dict(), "model_config": {}})


def test_init_from_copies_the_encoder_and_maps_single_heads(tmp_path):
    from zipformer_pc.checkpoint import init_from_checkpoint

    src = small_model("norm", seed=1)
    _save(src, tmp_path / "epoch-3.pt")
    sd = src.state_dict()

    two = small_model("two-decoder", seed=2)
    got = init_from_checkpoint(two, tmp_path / "epoch-3.pt", ["encoder", "decoders", "joiners"])
    out = two.state_dict()
    enc = [k for k in out if k.startswith("encoder.")]
    assert enc and all(torch.equal(out[k], sd[k]) for k in enc)
    for head in ("N", "P"):  # both heads start from the norm model's single head
        for k in [k for k in sd if k.startswith(("decoders.main.", "joiners.main."))]:
            assert torch.equal(out[k.replace(".main.", f".{head}.")], sd[k])
    assert got["kept"] == []

    cond = small_model("conditioned", seed=3)
    before = {k: v.clone() for k, v in cond.state_dict().items()}
    got = init_from_checkpoint(cond, tmp_path / "epoch-3.pt", ["encoder"])
    after = cond.state_dict()
    # only the encoder was asked for: the heads keep their initialisation
    assert all(torch.equal(after[k], before[k]) for k in after if not k.startswith("encoder."))
    assert all(torch.equal(after[k], sd[k]) for k in after if k.startswith("encoder."))
    got = init_from_checkpoint(cond, tmp_path / "epoch-3.pt", ["decoders"])
    # the mode embedding and the convolution over [token; mode] have no counterpart
    assert any("mode" in k for k in got["kept"]) and any(k.startswith("decoders.main.") for k in got["copied"])


def test_init_from_rejects_another_encoder_and_unknown_modules(tmp_path):
    from zipformer_pc.checkpoint import init_from_checkpoint

    torch.manual_seed(0)
    other = build_model(make_model_config(
        "tiny", {"encoder_dim": "32", "feedforward_dim": "64", "num_heads": "2", "encoder_unmasked_dim": "32",
                 "num_encoder_layers": "1,1,1,1,1,1"},
        HeadConfig(model_type="norm", vocab_size=VOCAB, decoder_dim=64, joiner_dim=64)))
    _save(other, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="encoder .* does not match"):
        init_from_checkpoint(small_model("norm"), tmp_path / "other.pt", ["encoder"])
    with pytest.raises(ValueError, match="Unknown --init-modules"):
        init_from_checkpoint(small_model("norm"), tmp_path / "other.pt", ["encoderz"])


def test_auxiliary_ctc_loss_adds_to_the_loss_and_trains_its_output():
    torch.manual_seed(0)
    head = HeadConfig(model_type="conditioned", vocab_size=VOCAB, decoder_dim=64, joiner_dim=64, mode_dim=8, ctc=True)
    cfg = make_model_config(
        "tiny", {"encoder_dim": "64", "feedforward_dim": "128", "num_heads": "2", "encoder_unmasked_dim": "64",
                 "num_encoder_layers": "1,1,1,1,1,1"}, head)
    model = build_model(cfg)
    feats, lens, tn, tp = batch()
    without = model(feats, lens, tn, tp, alpha=0.5)
    assert float(without["loss_ctc"]) == 0.0
    model.eval()  # no dropout: the two calls see the same network
    a = model(feats, lens, tn, tp, alpha=0.5)
    b = model(feats, lens, tn, tp, alpha=0.5, ctc_scale=0.3)
    assert b["loss_ctc"].item() > 0
    torch.testing.assert_close(b["loss"], a["loss"] + 0.3 * b["loss_ctc"])
    # the per-utterance CTC mean equals torch's own CTC on each utterance
    enc, enc_lens = model.encoder(feats, lens)
    per_utt = [float(model.ctc_loss(enc[i:i + 1], enc_lens[i:i + 1], [tn[i]]).detach()) for i in range(3)]
    assert abs(b["loss_ctc"].item() - sum(per_utt) / 3) < 1e-3
    model.train()
    b = model(feats, lens, tn, tp, alpha=0.5, ctc_scale=0.3)
    b["loss"].backward()
    assert model.ctc_output[1].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="CTC output"):
        small_model("norm")(feats, lens, tn, tp, ctc_scale=0.2)
