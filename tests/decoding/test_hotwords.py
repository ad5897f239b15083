"""Hotwords: the context graph (Aho-Corasick over token ids, bonus per matched token, taken back when
a match fails, banked when a phrase completes), the hotword lists and each mode's form and pieces,
and modified beam search with per-stream lists (the shipped model on espeak-ng speech)."""

import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import speech_like
from zipformer_pc.runtime.context_graph import ROOT, ContextGraph
from zipformer_pc.runtime.hotwords import (DEFAULT_HOTWORDS_SCORE, Hotword, PieceEncoder, as_hotwords, build_graphs,
                                           mode_form, parse_hotword, read_hotwords)

REPO = Path(__file__).resolve().parents[2]
PRETRAINED = REPO / "egs" / "synth" / "pretrained"
S = 1.5


def graph(*phrases, vocab=20, score=S, boundary=None):
    """A graph of phrases given as token-id lists (named by their ids)."""
    return ContextGraph([(p, score, "-".join(map(str, p))) for p in phrases], vocab, boundary)


def walk(g, tokens):
    """The bonus of each step and the states, from the root."""
    state, bonuses, states = ROOT, [], []
    for t in tokens:
        b, state = g.forward(state, t)
        bonuses.append(b)
        states.append(state)
    return bonuses, states


# ---------------------------------------------------------------------------
# the graph


def test_a_partial_match_earns_per_token_and_gives_it_back_when_it_fails():
    g = graph([1, 2, 3])
    bonuses, states = walk(g, [1, 2, 9])
    assert bonuses == pytest.approx([S, S, -2 * S])
    assert states[-1] == ROOT and g.pending(states[1]) == pytest.approx(2 * S)
    total, state = g.total_bonus([5, 1, 2, 9, 4])
    assert total == pytest.approx(0.0) and state == ROOT and g.find([5, 1, 2, 9, 4]) == []


def test_a_completed_phrase_keeps_its_bonus_whatever_follows():
    g = graph([1, 2, 3])
    bonuses, states = walk(g, [1, 2, 3, 9])
    # each token earns its bonus; the next token banks the phrase as it takes the held bonus back
    assert bonuses == pytest.approx([S, S, S, 0.0])
    assert sum(bonuses) == pytest.approx(3 * S) and g.matches(states[2]) == ["1-2-3"]
    # a path that ends with the phrase (the segment ends): complete, nothing held
    total, state = g.total_bonus([1, 2, 3])
    assert total == pytest.approx(3 * S) and g.pending(state) == 0.0 and g.finalize(state) == 0.0
    assert g.pending(states[1]) == pytest.approx(2 * S) and g.finalize(states[1]) == pytest.approx(-2 * S)
    assert g.total_bonus([1, 2, 3, 1, 2, 3, 7])[0] == pytest.approx(6 * S)  # twice in a row


def test_a_phrase_counts_as_whole_words_only():
    # 0-4 start a word (or are marks), 5-9 go on with the word before them
    g = graph([1, 6], [2, 7, 3, 8], vocab=10, boundary=[True] * 5 + [False] * 5)
    assert g.total_bonus([1, 6, 4])[0] == pytest.approx(2 * S)  # "Queequeg stood"
    assert g.total_bonus([1, 6, 7, 4])[0] == pytest.approx(0.0)  # "Queequegood": taken back
    total, state = g.total_bonus([1, 6])  # at the end of the segment
    assert total + g.finalize(state) == pytest.approx(2 * S)
    assert g.find([1, 6, 2, 7, 3, 8, 9, 1, 6, 0]) == [(1, "1-6"), (9 - 1, "1-6")]
    assert g.find([2, 7, 3, 8, 4]) == [(3, "2-7-3-8")]
    # a path that stops emitting after a phrase holds what a path that goes on banks: no reason to stop
    b_stop, b_on = g.pending(g.state_after([1, 6])), g.forward(g.state_after([1, 6]), 4)[0]
    assert b_stop == 0.0 and b_on == pytest.approx(0.0)


def test_a_failed_match_falls_back_to_the_longest_suffix_that_still_matches():
    g = graph([1, 2, 3], [2, 3, 4])
    bonuses, states = walk(g, [1, 2, 3, 4])
    # 1 2 3 completes the first phrase; 4 fails there, but 2 3 is a partial match of the second: it
    # continues from there (2 3's bonus given back and earned again), completing the second phrase
    assert g.find([1, 2, 3, 4]) == [(2, "1-2-3"), (3, "2-3-4")]
    assert sum(bonuses) + g.finalize(states[-1]) == pytest.approx(6 * S)
    # 1 2 then 3 9: the partial 1 2 3 fails with nothing completed
    assert g.total_bonus([1, 2, 3, 9])[0] == pytest.approx(3 * S)  # 1 2 3 completed: kept
    g2 = graph([1, 2, 5], [2, 3])
    b, s = walk(g2, [1, 2, 3])
    assert s[-1] == g2.state_after([2, 3]) and g2.matches(s[-1]) == ["2-3"]
    assert sum(b) - g2.pending(s[-1]) == pytest.approx(2 * S)


def test_overlapping_phrases_all_match():
    # the classic he / she / his / hers: h=1 e=2 s=3 i=4 r=5
    he, she, his, hers = [1, 2], [3, 1, 2], [1, 4, 3], [1, 2, 5, 3]
    g = graph(he, she, his, hers)
    text = [3, 1, 2, 5, 3]  # "shers"
    assert g.find(text) == [(2, "3-1-2"), (2, "1-2"), (4, "1-2-5-3")]
    total, state = g.total_bonus(text)
    assert total + g.finalize(state) == pytest.approx(S * (3 + 2 + 4))
    # a phrase that is a prefix of another: both are banked on the way
    g = graph([1, 2], [1, 2, 3])
    assert g.total_bonus([1, 2, 3, 9])[0] == pytest.approx(S * (2 + 3))
    assert g.total_bonus([1, 2, 9])[0] == pytest.approx(S * 2)


def test_a_shared_prefix_earns_the_larger_bonus_and_duplicates_count_once():
    g = ContextGraph([([1, 2, 3], 1.0, "a"), ([1, 2, 4], 2.0, "b"), ([1, 2, 3], 1.0, "a again")], 10)
    assert g.num_phrases == 2 and g.matches(g.state_after([1, 2, 3])) == ["a again"]
    assert walk(g, [1, 2])[0] == pytest.approx([2.0, 2.0])
    assert g.total_bonus([1, 2, 4, 9])[0] == pytest.approx(6.0)
    assert g.total_bonus([1, 2, 3, 9])[0] == pytest.approx(4.0 + 1.0)  # the shared 1 2 at 2.0, then 3 at 1.0


def test_the_banked_bonus_is_the_sum_over_completed_phrases_on_random_lists():
    rng = random.Random(5)
    for _ in range(300):
        phrases = {tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 5))}
        boundary = [rng.random() < 0.6 for _ in range(6)]
        g = ContextGraph([(p, S, "-".join(map(str, p))) for p in phrases], 6, boundary)
        tokens = [rng.randint(0, 5) for _ in range(rng.randint(0, 30))]
        total, state = g.total_bonus(tokens)
        found = [(i, p) for i in range(len(tokens)) for p in phrases
                 if i + 1 >= len(p) and tuple(tokens[i - len(p) + 1 : i + 1]) == p
                 and (i + 1 == len(tokens) or boundary[tokens[i + 1]])]
        assert sorted(g.find(tokens)) == sorted((i, "-".join(map(str, p))) for i, p in found)
        assert total + g.finalize(state) == pytest.approx(S * sum(len(p) for _, p in found))
        assert 0 <= g.pending(state) <= S * g.depths[state] + 1e-9


def test_the_rows_for_beam_search_equal_one_step_at_a_time():
    g = graph([1, 2, 3], [2, 3, 4], [3, 1], [5], vocab=8, boundary=[True, False] * 4)
    for state in range(len(g)):
        bonus, nxt = g.rows(state)
        for t in range(8):
            b, n = g.forward(state, t)
            assert bonus[t] == pytest.approx(b) and nxt[t] == n
    states = [ROOT, g.state_after([1, 2])]
    bonus, nxt = g.fusion(states, skip=(0, 6, -1))
    assert (bonus[:, [0, 6]] == 0).all() and (nxt[:, 0] == states).all() and (nxt[:, 6] == states).all()
    assert bonus[1, 3] == pytest.approx(g.forward(states[1], 3)[0])


def test_bad_phrases_are_refused():
    with pytest.raises(ValueError, match="no tokens"):
        ContextGraph([([], 1.0, "x")], 5)
    with pytest.raises(ValueError, match="outside"):
        ContextGraph([([7], 1.0, "x")], 5)
    with pytest.raises(ValueError, match="positive"):
        ContextGraph([([1], 0.0, "x")], 5)


# ---------------------------------------------------------------------------
# hotword lists, forms, pieces


def test_hotword_lines_and_files(tmp_path):
    assert parse_hotword("Queequeg") == Hotword("Queequeg", None)
    assert parse_hotword("  Captain Ahab  :2.5 ") == Hotword("Captain Ahab", 2.5)
    assert parse_hotword("ratio:3") == Hotword("ratio:3", None)  # no space before ':': part of the phrase
    for bad, why in (("Ahab :x", "must be a number"), ("Ahab :0", "above 0"), ("Ahab :1e9", "at most"),
                     ("  ", "empty")):
        with pytest.raises(ValueError, match=why):
            parse_hotword(bad)
    f = tmp_path / "hw.txt"
    f.write_text("# names\nQueequeg :3\n\nMoby-Dick\n", encoding="utf-8")
    assert read_hotwords(f) == [Hotword("Queequeg", 3.0), Hotword("Moby-Dick", None)]
    f.write_text("Ahab\nStubb :-1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"hw.txt:2: "):
        read_hotwords(f)
    assert as_hotwords(["Ahab :2", ("Stubb", 3), Hotword("Pip")]) == [Hotword("Ahab", 2.0), Hotword("Stubb", 3.0),
                                                                    Hotword("Pip")]


def test_each_mode_has_its_form():
    assert mode_form("Moby-Dick", "P") == "Moby-Dick" and mode_form("Moby-Dick", "N") == "moby dick"
    assert mode_form("Queequeg's harpoon;", "P") == "Queequeg's harpoon" and mode_form("Mr. Stubb", "N") == "mr stubb"
    assert mode_form("\u00c9lan", "P") == "Elan"


def test_the_fewest_pieces_spell_a_phrase_without_a_sentencepiece_model():
    tokens = ["<blk>", "<sos/eos>", "<unk>", "\u2581", "a", "b", "ab", "\u2581ab", "\u2581a", "c", "\u2581c", "A"]
    enc = PieceEncoder(tokens)
    assert [tokens[i] for i in enc.encode("abab c")] == ["\u2581ab", "ab", "\u2581c"]
    assert [tokens[i] for i in enc.encode("Abc")] == ["\u2581", "A", "b", "c"]
    with pytest.raises(ValueError, match="cannot be written"):
        enc.encode("abd")


@pytest.mark.skipif(not (PRETRAINED / "bpe.model").exists(), reason="needs the shipped model")
def test_both_modes_graphs_with_the_shipped_tokenizer():
    from zipformer_pc.runtime.recognizer import StreamingRecognizer

    tokens = StreamingRecognizer._read_tokens(PRETRAINED / "tokens.txt")
    enc = PieceEncoder(tokens, PRETRAINED / "bpe.model")
    graphs = build_graphs(as_hotwords(["Queequeg :2.5", "Moby-Dick"]), ["P", "N"], enc, DEFAULT_HOTWORDS_SCORE,
                          len(tokens))
    ids = {m: {p: enc.encode(mode_form(p, m)) for p in ("Queequeg", "Moby-Dick")} for m in ("P", "N")}
    assert [tokens[i] for i in ids["P"]["Queequeg"]] == ["\u2581", "Q", "u", "e", "e", "q", "u", "e", "g"]
    assert [tokens[i] for i in ids["N"]["Queequeg"]] == ["\u2581", "q", "u", "e", "e", "q", "u", "e", "g"]
    for m, form in (("P", "Moby-Dick"), ("N", "moby dick")):
        g = graphs[m]
        assert g.num_phrases == 2
        assert g.find(ids[m]["Queequeg"]) == [(8, "Queequeg" if m == "P" else "queequeg")]
        assert g.find(ids[m]["Moby-Dick"])[-1][1] == form
        total, state = g.total_bonus(ids[m]["Queequeg"])
        assert total + g.finalize(state) == pytest.approx(2.5 * 9)  # its own bonus per token
        # the phrase followed by a word start or a mark is complete; by more letters, not
        for after, kept in (("\u2581the", 2.5 * 9), (",", 2.5 * 9), ("'", 2.5 * 9), ("ed", 0.0)):
            assert g.total_bonus(ids[m]["Queequeg"] + [tokens.index(after)])[0] == pytest.approx(kept), after
    assert graphs["P"].find(ids["N"]["Queequeg"]) == []  # P's phrase is cased
    with pytest.raises(ValueError, match="no words in mode P"):
        build_graphs(as_hotwords(["--"]), ["P"], enc, 1.5, len(tokens))


# ---------------------------------------------------------------------------
# beam search


@pytest.fixture(scope="module")
def shipped():
    if not (PRETRAINED / "bpe.model").exists():
        pytest.skip("needs the shipped model")
    from zipformer_pc.runtime.recognizer import StreamingRecognizer

    return StreamingRecognizer.from_dir(PRETRAINED, decoding_method="modified_beam_search", lm_scale=0.6,
                                        lm_token_bonus=0.5, lodr_scale=0.25)


def _espeak(tmp_path, text):
    if not shutil.which("espeak-ng"):
        pytest.skip("needs espeak-ng")
    from zipformer_pc.runtime import read_wav

    wav = tmp_path / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us+m1", "-s", "165", "-w", str(wav), text], check=True)
    return read_wav(str(wav))


def _decode(rec, stream, x, rate):
    step = rate // 10
    for k in range(0, len(x), step):
        stream.accept_waveform(rate, x[k : k + step])
        rec.decode_stream(stream)
    stream.input_finished()
    return rec.transcript(rec.finish(stream))


def test_beam_search_writes_the_hotwords_in_both_modes_per_stream(shipped, tmp_path):
    x, rate = _espeak(tmp_path, "Queequeg stood by the rail and watched the sea from the deck of the Pequod.")
    plain = _decode(shipped, shipped.create_stream(), x, rate)
    assert "Queequeg" not in plain["P"] and "queequeg" not in plain["N"], plain  # the model misses them
    assert "pequod" not in plain["N"]
    names = ["Queequeg :3", "Pequod :3"]
    biased = _decode(shipped, shipped.create_stream(hotwords=names), x, rate)
    assert biased["P"].split()[0] == "Queequeg" and biased["N"].split()[0] == "queequeg", biased
    assert biased["N"].endswith("the deck of the pequod"), biased
    # the words around them stay as they were
    assert "stood by the rail and watched the sea from the" in plain["N"]
    assert "stood by the rail and watched the sea from the" in biased["N"]
    # one recognizer, streams with different lists decoded in one batch: each as if alone
    streams = [shipped.create_stream(hotwords=names), shipped.create_stream(), shipped.create_stream(hotwords=[])]
    for s in streams:
        s.accept_waveform(rate, x)
        s.input_finished()
    shipped.decode_streams(streams)
    assert [shipped.transcript(shipped.finish(s)) for s in streams] == [biased, plain, plain]


def test_hotwords_need_beam_search_and_come_before_the_audio(shipped, tiny_onnx_model):
    from zipformer_pc.runtime.recognizer import StreamingRecognizer

    greedy = StreamingRecognizer.from_dir(tiny_onnx_model)
    with pytest.raises(ValueError, match="need modified_beam_search"):
        greedy.create_stream(hotwords=["w3"])
    with pytest.raises(ValueError, match="need modified_beam_search"):
        StreamingRecognizer.from_dir(tiny_onnx_model, hotwords=["w3"])
    assert greedy.create_stream(hotwords=[]).contexts == {}
    s = shipped.create_stream()
    s.accept_waveform(16000, speech_like(1.0, seed=1))
    shipped.decode_stream(s)
    with pytest.raises(RuntimeError, match="began to be decoded"):
        shipped.set_hotwords(s, ["Ahab"])
    with pytest.raises(ValueError, match="cannot write|no words"):
        shipped.create_stream(hotwords=["\u2603"])


def test_a_recognizer_wide_list_and_the_tiny_models_tokens(tiny_onnx_model):
    """Without a bpe.model the fewest pieces of tokens.txt spell the phrases (the tiny fixture's
    vocabulary: word starts w0, W1, inner pieces x2 ...); every stream gets the recognizer's list
    unless it has its own."""
    from zipformer_pc.runtime.recognizer import StreamingRecognizer

    rec = StreamingRecognizer.from_dir(tiny_onnx_model, decoding_method="modified_beam_search",
                                       hotwords=["w3x2 w0 :4", "w45x8x8x8 :4"], blank_penalty=0.0)
    assert set(rec.default_contexts) == {"P", "N"}
    ids = [rec.tokens.index(t) for t in ("\u2581w3", "x2", "\u2581w0")]
    assert rec.default_contexts["N"].find(ids) == [(2, "w3x2 w0")]
    x = np.concatenate([speech_like(2.0, seed=4), np.zeros(8000, np.float32)])
    default, own, none = (rec.create_stream(), rec.create_stream(hotwords=["w27 w27 w27 w27 :3"]),
                          rec.create_stream(hotwords=[]))
    assert default.contexts is not own.contexts and none.contexts == {}
    out = [_decode(rec, s, x, 16000) for s in (default, own, none)]
    assert "w45x8x8x8" in out[0]["N"].split() and "w45x8x8x8" not in out[2]["N"].split(), out
    assert out[1]["N"].count("w27") > out[2]["N"].count("w27"), out


def test_the_command_line_takes_a_hotword_file(tmp_path, tiny_onnx_model):
    from conftest import write_wav

    wav = tmp_path / "a.wav"
    write_wav(wav, speech_like(2.0, seed=4))
    hw = tmp_path / "hw.txt"
    hw.write_text("w45x8x8x8 :4\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(tiny_onnx_model), "--hotwords", str(hw),
           "--blank-penalty", "0"]
    r = subprocess.run(cmd + [str(wav)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "--hotwords needs --decoding-method modified_beam_search" in r.stderr, r.stderr
    beam = ["--decoding-method", "modified_beam_search"]
    r = subprocess.run(cmd + beam + [str(wav)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "w45x8x8x8" in r.stdout.split("N: ")[1].split(), r.stdout
    hw.write_text("w6 :nope\n", encoding="utf-8")
    r = subprocess.run(cmd + beam + [str(wav)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "hw.txt:1: hotword 'w6 :nope'" in r.stderr, r.stderr
    hw.write_text("W7\n", encoding="utf-8")  # the tiny vocabulary has W7 but no w7 for N
    r = subprocess.run(cmd + beam + [str(wav)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "error: hotword 'W7' in mode N: 'w7' cannot be written" in r.stderr, r.stderr
