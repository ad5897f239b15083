"""Transducer heads, the alpha-weighted loss and checkpoint averaging (fast units)."""

import pytest
import torch

from zipformer_pc.training.checkpoint import (
    RunningAverage,
    average_between,
    average_state_dicts,
    averaged_weights,
    load_checkpoint,
    save_checkpoint,
)
from zipformer_pc.model.decoder import Decoder
from zipformer_pc.model.loss import LossConfig
from zipformer_pc.model.transducer import (SENTENCE_END_FRAMES, HeadConfig, Transducer, build_model,
                                           make_model_config, sentence_end_classes)
from zipformer_pc.modes import MODE_N, MODE_P

VOCAB = 40


def small_model(model_type: str, seed: int = 0, context_size: int = 2, **head_options) -> Transducer:
    torch.manual_seed(seed)
    head = HeadConfig(model_type=model_type, vocab_size=VOCAB, decoder_dim=64, joiner_dim=64, mode_dim=8,
                      context_size=context_size, **head_options)
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


@pytest.mark.parametrize("mode_dim", [0, 8])
def test_every_starting_context_is_the_same(mode_dim):
    """sherpa-onnx's greedy search starts from ``[-1, ..., -1, blank]``, ours
    from ``[blank] * context_size``: blank and padding must both embed to
    zeros, even when the weights' blank row is not zero (older checkpoints,
    N(0, 1) initialisation), or the first token differs between runtimes."""
    torch.manual_seed(0)
    d = Decoder(VOCAB, 32, context_size=3, mode_dim=mode_dim, embed_std=1.0)
    with torch.no_grad():
        d.embedding.weight[0].normal_()
    modes = (MODE_N, MODE_P) if mode_dim else (None,)
    for mode in modes:
        ours = d(torch.tensor([[0, 0, 0]]), mode, need_pad=False)
        for ctx in ([-1, -1, 0], [-1, 0, 0], [-1, -1, -1]):
            assert torch.equal(d(torch.tensor([ctx]), mode, need_pad=False), ours), (mode, ctx)
        # a real token still counts
        assert not torch.allclose(d(torch.tensor([[0, 0, 5]]), mode, need_pad=False), ours)
    if mode_dim:  # the mode survives an all-blank context
        assert not torch.allclose(d(torch.tensor([[0, 0, 0]]), MODE_N, need_pad=False),
                                  d(torch.tensor([[0, 0, 0]]), MODE_P, need_pad=False))


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
    enc, enc_lens = m.encode(feats, lens)
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


def _stepping_model():
    """A tiny module whose weights we set by hand, with a non-floating buffer."""
    m = torch.nn.Linear(3, 2)
    m.register_buffer("count", torch.tensor(0))
    return m


def _set(m, b: int) -> None:
    g = torch.Generator().manual_seed(b)
    with torch.no_grad():
        m.weight.copy_(torch.randn(2, 3, generator=g))
        m.bias.copy_(torch.randn(2, generator=g))
        m.count.fill_(b)


@pytest.mark.parametrize("period", [1, 3, 200])
def test_running_average_is_the_exact_mean_of_every_batch_whatever_the_period(period):
    # Checkpoints at irregular batches (epochs of 7, 2 and 11 batches), some
    # shorter than the period: the mean always covers every batch so far, and
    # average_between recovers each interval exactly (float64, atol 1e-12).
    m = _stepping_model()
    ra = RunningAverage(m, period)
    per_step, saved = [], {}
    for b in range(1, 21):
        _set(m, b)
        ra.step()
        per_step.append({k: v.clone() for k, v in m.state_dict().items()})
        if b in (7, 9, 20):
            saved[b] = {**ra.state_dict(), "batch_idx_train": b}
    for b, st in saved.items():
        assert st["model_avg_batches"] == b
        brute = sum(s["weight"].double() for s in per_step[:b]) / b
        torch.testing.assert_close(st["model_avg"]["weight"], brute, rtol=0, atol=1e-12)
        assert int(st["model_avg"]["count"]) == b  # non-floating: the latest value
    got = average_between(saved[7], saved[20])
    brute = sum(s["bias"].double() for s in per_step[7:20]) / 13
    torch.testing.assert_close(got["bias"], brute, rtol=0, atol=1e-12)
    got = average_between(None, saved[9])  # from the start of training
    torch.testing.assert_close(got["weight"], sum(s["weight"].double() for s in per_step[:9]) / 9, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="not after the start"):
        average_between(saved[20], saved[7])


def test_running_average_resumes_where_it_stopped():
    # 10 batches straight, or 4 + checkpoint + resume in a new object + 6: the same mean
    m = _stepping_model()
    a = RunningAverage(m, 3)
    for b in range(1, 11):
        _set(m, b)
        a.step()
    b_ = RunningAverage(m, 3)
    for b in range(1, 5):
        _set(m, b)
        b_.step()
    state = b_.state_dict()
    c = RunningAverage(m, 3)
    c.load_state_dict(state)
    for b in range(5, 11):
        _set(m, b)
        c.step()
    torch.testing.assert_close(a.state_dict()["model_avg"]["weight"], c.state_dict()["model_avg"]["weight"],
                               rtol=0, atol=1e-12)
    assert c.state_dict()["model_avg_batches"] == 10


def test_a_running_mean_equal_to_the_weights_is_stored_once_and_read_back_exactly(tmp_path):
    # a frozen layer (and the integer buffer, which takes the latest value) has a running mean
    # equal to its weights: the file names it instead of storing it, load_checkpoint rebuilds it
    frozen, trained = torch.nn.Linear(64, 64), _stepping_model()
    model = torch.nn.ModuleDict({"enc": frozen, "head": trained})
    ra = RunningAverage(model, 2)
    for b in range(1, 6):
        _set(trained, b)
        ra.step()
    state = {"model": model.state_dict(), **ra.state_dict(), "batch_idx_train": 5}
    save_checkpoint(tmp_path / "small.pt", state)
    torch.save(state, tmp_path / "whole.pt")
    raw = torch.load(tmp_path / "small.pt", weights_only=False)
    assert sorted(raw["model_avg"]) == ["head.bias", "head.weight"]
    assert (tmp_path / "small.pt").stat().st_size < 0.6 * (tmp_path / "whole.pt").stat().st_size
    back = load_checkpoint(tmp_path / "small.pt")
    assert sorted(back["model_avg"]) == sorted(state["model_avg"]) and "model_avg_from_model" not in back
    for k, v in state["model_avg"].items():
        assert back["model_avg"][k].dtype == v.dtype and torch.equal(back["model_avg"][k], v), k
    assert int(back["model_avg"]["head.count"]) == 5
    # resuming from it continues the same mean
    again = RunningAverage(model, 2)
    again.load_state_dict(back)
    assert torch.equal(again.state_dict()["model_avg"]["head.weight"], state["model_avg"]["head.weight"])


def _write_ckpt(path, m, ra, batch, steps, epoch):
    save_checkpoint(path, {"model": m.state_dict(), **ra.state_dict(), "batch_idx_train": batch,
                           "optimizer_steps": steps, "cur_epoch": epoch, "model_config": {}})


def test_averaged_weights_picks_the_interval_logs_it_and_refuses_untrained_or_old_weights(tmp_path, caplog):
    m = _stepping_model()
    ra = RunningAverage(m, 200)
    ws = []
    for b in range(1, 13):  # epochs of 4 batches, checkpoints every 3 batches
        _set(m, b)
        ra.step()
        ws.append(m.weight.detach().double().clone())
        if b % 3 == 0:
            _write_ckpt(tmp_path / f"checkpoint-{b}.pt", m, ra, b, b, (b - 1) // 4 + 1)
        if b % 4 == 0:
            _write_ckpt(tmp_path / f"epoch-{b // 4}.pt", m, ra, b, b, b // 4)
    with caplog.at_level("INFO"):
        w = averaged_weights(tmp_path, epoch=3, avg=2)
    torch.testing.assert_close(w["model"]["weight"], sum(ws[4:12]) / 8, rtol=0, atol=1e-12)
    assert w["batches"] == (5, 12) and "batches 5..12" in caplog.text
    w = averaged_weights(tmp_path, epoch=2, avg=5)  # reaches back to the start of training
    torch.testing.assert_close(w["model"]["weight"], sum(ws[:8]) / 8, rtol=0, atol=1e-12)
    w = averaged_weights(tmp_path, iteration=12, avg=2)
    torch.testing.assert_close(w["model"]["weight"], sum(ws[6:12]) / 6, rtol=0, atol=1e-12)
    assert w["desc"] == "iter-12-avg-2" and w["batches"] == (7, 12)
    with pytest.raises(FileNotFoundError, match="checkpoint-11.pt not found"):
        averaged_weights(tmp_path, iteration=11, avg=1)
    with pytest.raises(FileNotFoundError, match="needs 5 checkpoint"):
        averaged_weights(tmp_path, iteration=12, avg=4)
    # --iter B --avg A with only A checkpoints up to B: from the start of training,
    # when the run's --keep-last-k cannot have removed any (unknown above: refused)
    for b in (3, 6, 9, 12):
        ck = load_checkpoint(tmp_path / f"checkpoint-{b}.pt")
        save_checkpoint(tmp_path / f"checkpoint-{b}.pt", {**ck, "args": {"keep_last_k": 0}})
    w = averaged_weights(tmp_path, iteration=12, avg=4)
    torch.testing.assert_close(w["model"]["weight"], sum(ws[:12]) / 12, rtol=0, atol=1e-12)
    assert w["batches"] == (1, 12)
    w = averaged_weights(tmp_path, iteration=3, avg=1)  # a run's first checkpoint
    torch.testing.assert_close(w["model"]["weight"], sum(ws[:3]) / 3, rtol=0, atol=1e-12)
    ck = load_checkpoint(tmp_path / "checkpoint-12.pt")
    save_checkpoint(tmp_path / "checkpoint-12.pt", {**ck, "args": {"keep_last_k": 4}})  # may have removed some
    with pytest.raises(FileNotFoundError, match="needs 5 checkpoint"):
        averaged_weights(tmp_path, iteration=12, avg=4)
    plain = averaged_weights(tmp_path, epoch=3, avg=2, use_averaged_model=False)
    torch.testing.assert_close(plain["model"]["weight"].double(), (ws[7] + ws[11]) / 2)
    # a checkpoint whose model never took an optimizer step is refused
    fresh = RunningAverage(m, 200)
    fresh.step()
    _write_ckpt(tmp_path / "epoch-9.pt", m, fresh, 1, 0, 9)
    for avg_model in (True, False):
        with pytest.raises(ValueError, match="never saw a training step"):
            averaged_weights(tmp_path, epoch=9, avg=1, use_averaged_model=avg_model)
    # checkpoints written before exact averaging: a clear message, not old-style extrapolation
    old = {"model": m.state_dict(), "model_avg": m.state_dict(), "batch_idx_train": 4, "cur_epoch": 1,
           "model_config": {}}
    save_checkpoint(tmp_path / "old" / "epoch-1.pt", old)
    save_checkpoint(tmp_path / "old" / "epoch-2.pt", {**old, "batch_idx_train": 8})
    with pytest.raises(ValueError, match="use-averaged-model false"):
        averaged_weights(tmp_path / "old", epoch=2, avg=1)
    assert averaged_weights(tmp_path / "old", epoch=2, avg=1, use_averaged_model=False)["batches"] == (8, 8)


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
        return torch.nn.functional.one_hot(nxt, 5).float() - 0.01 * torch.arange(5)  # no ties among the rest


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
    from zipformer_pc.decoding.beam_search import greedy_search_batch

    enc = torch.zeros(3, 2, 4)
    lens = torch.tensor([2, 1, 0])  # the third utterance has no frame: nothing may be emitted
    assert greedy_search_batch(_StubModel(), enc, lens, MODE_P, max_sym_per_frame=max_sym) == expected
    with pytest.raises(ValueError):
        greedy_search_batch(_StubModel(), enc, lens, MODE_P, max_sym_per_frame=0)


@pytest.mark.parametrize("method", ["greedy_search", "modified_beam_search"])
def test_blank_penalty_moves_blank_only(method):
    """decode.py's searches take the runtime's blank penalty: subtracted from blank's logit,
    so a large one makes every frame emit (the stub's 1, 2, 3 then its next best, 1, ...),
    a large negative one leaves nothing (beam 1: both searches alike); a NaN is refused."""
    from zipformer_pc.decoding.beam_search import search

    enc = torch.zeros(2, 7, 4)
    lens = torch.tensor([7, 2])

    def run(penalty):
        return search(_StubModel(), enc, lens, MODE_P, method, beam=1, blank_penalty=penalty)

    assert run(0.0) == [[1, 2, 3], [1, 2]]
    assert run(5.0) == [[1, 2, 3, 1, 2, 3, 1], [1, 2]]
    assert run(-5.0) == [[], []]
    with pytest.raises(ValueError, match="blank_penalty"):
        run(float("nan"))


def _save(model: Transducer, path):
    from zipformer_pc.training.checkpoint import save_checkpoint

    save_checkpoint(path, {"model": model.state_dict(), "model_config": {}})


def test_init_from_copies_the_encoder_and_maps_single_heads(tmp_path):
    from zipformer_pc.training.checkpoint import init_from_checkpoint

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
    # the mode embedding has no counterpart; the narrower token embedding takes
    # the norm's leading columns, the convolution over [token; mode] is copied
    assert got["kept"] == ["decoders.main.mode_embedding.weight"], got["kept"]
    after = cond.state_dict()
    emb = after["decoders.main.embedding.weight"]
    assert emb.size(1) < sd["decoders.main.embedding.weight"].size(1)
    assert torch.equal(emb, sd["decoders.main.embedding.weight"][:, : emb.size(1)])
    assert torch.equal(after["decoders.main.conv.weight"], sd["decoders.main.conv.weight"])


def test_init_from_widens_the_predictor_context_without_changing_its_outputs(tmp_path):
    """--context-size K > the init model's: the trained taps see the newest
    tokens, the older tokens' taps start at zero, so the predictor's outputs
    are those of the init model until training moves the new taps."""
    from zipformer_pc.training.checkpoint import init_from_checkpoint

    src = small_model("conditioned", seed=1)
    _save(src, tmp_path / "c2.pt")
    wide = small_model("conditioned", seed=4, context_size=6)
    got = init_from_checkpoint(wide, tmp_path / "c2.pt", ["encoder", "decoders", "joiners"])
    assert "decoders.main.conv.weight" in got["copied"] and got["kept"] == []
    w = wide.state_dict()["decoders.main.conv.weight"]
    assert w.shape[2] == 6 and torch.equal(w[..., -2:], src.state_dict()["decoders.main.conv.weight"])
    assert not w[..., :-2].any()
    y = torch.randint(1, VOCAB, (4, 12), generator=torch.Generator().manual_seed(0))
    for mode in (MODE_N, MODE_P):
        assert torch.allclose(wide.decoders["main"](y, mode=mode), src.decoders["main"](y, mode=mode), atol=1e-6)
    with torch.no_grad():  # the widened taps are real: an older token now changes the output
        wide.decoders["main"].conv.weight[..., 0] = 0.1
    assert not torch.allclose(wide.decoders["main"](y, mode=MODE_P), src.decoders["main"](y, mode=MODE_P))


def test_init_from_rejects_another_encoder_and_unknown_modules(tmp_path):
    from zipformer_pc.training.checkpoint import init_from_checkpoint

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
    enc, enc_lens = model.encode(feats, lens)
    per_utt = [float(model.ctc_loss(enc[i:i + 1], enc_lens[i:i + 1], [tn[i]]).detach()) for i in range(3)]
    assert abs(b["loss_ctc"].item() - sum(per_utt) / 3) < 1e-3
    model.train()
    b = model(feats, lens, tn, tp, alpha=0.5, ctc_scale=0.3)
    b["loss"].backward()
    assert model.ctc_output[1].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="CTC output"):
        small_model("norm")(feats, lens, tn, tp, ctc_scale=0.2)
    # --ctc-targets P: the references are the P ones, of the utterances that have P
    model.eval()
    p = model(feats, lens, tn, tp, alpha=0.5, ctc_scale=0.3, ctc_targets="P")
    with_p = [0, 2]
    per_utt_p = [float(model.ctc_loss(enc[i:i + 1], enc_lens[i:i + 1], [tp[i]]).detach()) for i in with_p]
    assert abs(p["loss_ctc"].item() - sum(per_utt_p) / 2) < 1e-3
    n = model(feats, lens, tn, tp, alpha=0.5, ctc_scale=0.3, ctc_targets="N")
    torch.testing.assert_close(n["loss_ctc"], model(feats, lens, tn, tp, alpha=0.5, ctc_scale=0.3)["loss_ctc"])
    assert abs(p["loss_ctc"].item() - n["loss_ctc"].item()) > 1e-3
    with pytest.raises(ValueError, match="ctc_targets"):
        model(feats, lens, tn, tp, ctc_scale=0.3, ctc_targets="PN")


def test_sentence_end_classes_come_from_the_mark_ending_the_p_reference():
    classes = sentence_end_classes(["He came.", "Did he come? ", None, "and so,", "Yes. Did he?", ""])
    assert classes.tolist() == [0, 1, -1, -1, 1, -1]


def test_sentence_end_loss_classifies_the_last_encoder_frames_of_the_utterances_with_a_class():
    model = small_model("conditioned", sentence_end=True)
    feats, lens, tn, tp = batch()
    classes = torch.tensor([1, -1, 0])  # the second utterance is not counted
    model.eval()
    a = model(feats, lens, tn, tp, alpha=0.5)
    assert float(a["loss_end"]) == 0.0
    b = model(feats, lens, tn, tp, alpha=0.5, sentence_end_scale=2.0, end_classes=classes)
    torch.testing.assert_close(b["loss"], a["loss"] + 2.0 * b["loss_end"])
    # by hand: each counted utterance's mean cross-entropy over its last SENTENCE_END_FRAMES frames
    enc, enc_lens = model.encode(feats, lens)
    assert int(enc_lens.min()) > SENTENCE_END_FRAMES
    per_utt = []
    for i, c in ((0, 1), (2, 0)):
        n = int(enc_lens[i])
        logp = model.sentence_end_output(enc[i, n - SENTENCE_END_FRAMES:n]).log_softmax(-1)
        per_utt.append(-float(logp[:, c].mean().detach()))
    assert abs(b["loss_end"].item() - sum(per_utt) / 2) < 1e-4
    model.train()
    out = model(feats, lens, tn, tp, alpha=0.5, sentence_end_scale=2.0, end_classes=classes)
    out["loss"].backward()
    assert model.sentence_end_output.weight.grad.abs().sum() > 0
    assert model.encoder.encoder_embed.conv[0].weight.grad.abs().sum() > 0
    # no utterance with a class: no term
    model.eval()
    none = model(feats, lens, tn, tp, alpha=0.5, sentence_end_scale=2.0, end_classes=torch.tensor([-1, -1, -1]))
    assert float(none["loss_end"]) == 0.0
    torch.testing.assert_close(none["loss"], a["loss"])
    with pytest.raises(ValueError, match="sentence-end output"):
        small_model("conditioned")(feats, lens, tn, tp, sentence_end_scale=1.0, end_classes=classes)
    with pytest.raises(ValueError, match="one end class per utterance"):
        model(feats, lens, tn, tp, sentence_end_scale=1.0)


def test_sentence_end_loss_of_an_utterance_shorter_than_its_window_averages_the_frames_it_has():
    model = small_model("conditioned", sentence_end=True).eval()
    torch.manual_seed(0)
    enc = torch.randn(2, SENTENCE_END_FRAMES + 9, model.sentence_end_output.in_features)
    enc_lens = torch.tensor([3, SENTENCE_END_FRAMES + 4])
    classes = torch.tensor([1, 0])
    with torch.no_grad():
        expect = 0.0
        for i in range(2):
            n = int(enc_lens[i])
            logp = model.sentence_end_output(enc[i, max(0, n - SENTENCE_END_FRAMES):n]).log_softmax(-1)
            expect += -float(logp[:, int(classes[i])].mean())
        got = float(model.sentence_end_loss(enc, enc_lens, classes))
        assert abs(got - expect) < 1e-4
        # frames after an utterance's end (padding) do not count
        enc[0, 3:] = 1e3
        assert abs(float(model.sentence_end_loss(enc, enc_lens, classes)) - expect) < 1e-4
