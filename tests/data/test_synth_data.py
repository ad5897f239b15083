"""End-to-end checks of the synthetic corpus built by ``prepare.sh --size tiny``.

The corpus is built once per test session (about 45 s on 2 cores); every
test reads it, and the tests that need to change something (the rerun, the
corrupted audio file, the text reproducibility) work on copies or new
directories.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zipformer_pc.data.references import P_KEY, RAW_KEY, SYNTH_PUNCT, get_n, get_p, has_p
from zipformer_pc.text import normalized, punctuated

from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]
make_subsets = local_module("make_subsets")
prepare_synth_text = local_module("prepare_synth_text")
tts = local_module("tts")

pytestmark = pytest.mark.slow

SPLITS = ("train", "dev", "test", "test_ood", "dev_ood")
PROPORTIONS = (1.0, 0.5, 0.35, 0.2, 0.05)
STAGES = {0: "text", 1: "speech", 2: "fbank", 3: "bpe", 4: "subsets"}
PY = sys.executable


def _run(cmd, timeout=600, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


def _prepare(data_dir):
    return _run(["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(data_dir)], timeout=900)


@pytest.fixture(scope="session")
def synth_build(tiny_corpus):
    """(DATA_DIR, None): the session's tiny corpus (tests/conftest.py), built once."""
    return tiny_corpus.parent, None


@pytest.fixture(scope="session")
def corpus(tiny_corpus) -> Path:
    return tiny_corpus


@pytest.fixture(scope="session")
def cuts(corpus):
    from lhotse import load_manifest

    return {s: load_manifest(corpus / "fbank" / f"synth_cuts_{s}.jsonl.gz") for s in SPLITS}


def _sup(cut):
    assert len(cut.supervisions) == 1
    return cut.supervisions[0]


def _text_lines(corpus, split):
    with open(corpus / "text" / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ------------------------------------------------------------------ cuts and features


def test_layout(corpus):
    for split in SPLITS:
        assert (corpus / "manifests" / f"synth_recordings_{split}.jsonl.gz").is_file()
        assert (corpus / "manifests" / f"synth_supervisions_{split}.jsonl.gz").is_file()
        assert (corpus / "fbank" / f"synth_feats_{split}.lca").is_file()
    for f in PROPORTIONS:
        assert (corpus / "fbank" / f"synth_cuts_train_{make_subsets.subset_name(f)}.jsonl.gz").is_file()
    assert (corpus / "fbank" / "synth_cuts_train_filtered.jsonl.gz").is_file()
    for name in STAGES.values():
        assert (corpus / f".done.{name}").is_file()
    stats = (corpus / "stats.md").read_text()
    for split in SPLITS:
        assert f"| synth_cuts_{split}.jsonl.gz |" in stats
    cfg = json.loads((corpus / "punct_config.json").read_text())
    assert cfg["synth"] == {"keep": list(SYNTH_PUNCT.keep), "map": dict(SYNTH_PUNCT.mapping)}


@pytest.mark.parametrize("split", SPLITS)
def test_cuts_validate_and_have_fbank_features(corpus, cuts, split):
    from lhotse.qa import validate

    cs = cuts[split]
    text = _text_lines(corpus, split)
    expected = {"dev": 12, "test": 12, "test_ood": 12}.get(split)
    if expected is not None:
        assert len(cs) == expected
    elif split == "dev_ood":  # utterances drawn to ~12 utterances' words: long ones make fewer
        assert 8 <= len(cs) <= 12
    else:
        assert 20 <= len(cs) <= 80
    # no synthesis failure on the tiny corpus: one cut per text line, same ids
    assert sorted(c.id for c in cs) == sorted(u["id"] for u in text)
    validate(cs, read_data=True)
    for cut in cs:
        assert cut.has_features and cut.has_recording
        assert cut.sampling_rate == 16000
        assert cut.num_features == 80
        assert cut.features.type == "kaldi-fbank"
        assert abs(cut.num_frames - cut.duration * 100) <= 2, (cut.id, cut.num_frames, cut.duration)
        assert 0.5 < cut.duration < 30
        feats = cut.load_features()
        assert feats.shape == (cut.num_frames, 80)
        assert np.isfinite(feats).all()
        assert feats.std() > 0.1  # speech, not a constant
        sup = _sup(cut)
        assert sup.start == 0 and abs(sup.duration - cut.duration) < 1e-3
        assert Path(cut.recording.sources[0].source).is_file()


# -------------------------------------------------------------------------- references


@pytest.mark.parametrize("split", SPLITS)
def test_references_p_and_n(corpus, cuts, split):
    text = {u["id"]: u for u in _text_lines(corpus, split)}
    with_marks = with_capital = 0
    cs = cuts[split]
    for cut in cs:
        sup = _sup(cut)
        n, p = sup.text, sup.custom[P_KEY]
        raw = sup.custom[RAW_KEY]
        assert n and p
        assert get_n(sup) == n and get_p(sup) == p and has_p(cut)
        assert n == normalized(p)
        assert n == normalized(raw)
        assert p == punctuated(raw, SYNTH_PUNCT)
        assert p == punctuated(p, SYNTH_PUNCT)  # idempotent
        assert n == n.lower() and not re.search(r"[.,?!;:\"]", n)
        assert not re.search(r"[!;:\"]", p)  # only . , ? survive (! is mapped to .)
        assert raw == text[cut.id]["text_raw"]
        with_marks += bool(re.search(r"[.,?]", p))
        with_capital += bool(re.search(r"[A-Z]", p))
    assert with_marks >= 0.9 * len(cs)
    assert with_capital >= 0.9 * len(cs)


@pytest.mark.parametrize("split", SPLITS)
def test_speaker_engine_voice_and_prosody_recorded(corpus, cuts, split):
    text = {u["id"]: u for u in _text_lines(corpus, split)}
    for cut in cuts[split]:
        sup = _sup(cut)
        t = sup.custom["tts"]
        assert sup.speaker == t["voice"]["name"]
        voice = tts.voice_by_name(sup.speaker)
        assert voice is not None and t["voice"] == tts.voice_dict(voice)
        assert t["voice"]["engine"] in ("espeak-ng", "festival", "flite")
        assert set(t) == {"voice", "rate", "pitch", "sox_pitch_cents", "sox_tempo"}
        assert -80 <= t["sox_pitch_cents"] <= 80 and 0.92 <= t["sox_tempo"] <= 1.08
        if voice.engine == "espeak-ng":
            assert t["rate"] > 0
        assert sup.custom["source"] == text[cut.id]["source"]
        assert sup.language == "English"


def test_speakers_and_sources_of_splits(cuts):
    speakers = {s: {_sup(c).speaker for c in cuts[s]} for s in SPLITS}
    sources = {s: {_sup(c).custom["source"] for c in cuts[s]} for s in SPLITS}
    train_pool = {v.name for v in tts.TRAIN_VOICES}
    ood_pool = {v.name for v in tts.OOD_VOICES}
    for s in ("test_ood", "dev_ood"):
        assert not speakers[s] & speakers["train"]
        assert speakers[s] <= ood_pool
    for s in ("train", "dev", "test"):
        assert speakers[s] <= train_pool
    assert len(speakers["train"]) >= 5  # several voices, not one
    assert sources["test_ood"] == sources["dev_ood"] == {"mobydick"}
    for s in ("train", "dev", "test"):
        assert sources[s] <= set(prepare_synth_text.AUSTEN_BOOKS)
    assert len(sources["train"]) >= 3


def test_eval_sentences_not_in_train(cuts):
    n = {s: [_sup(c).text for c in cuts[s]] for s in SPLITS}
    train = set(n["train"])
    for s in ("dev", "test", "test_ood", "dev_ood"):
        assert not train & set(n[s]), s
    assert not set(n["dev"]) & set(n["test"])
    assert not set(n["dev_ood"]) & set(n["test_ood"])
    assert len(set(n["train"])) == len(n["train"])
    # no sentence is shared either (the de-duplication is per sentence)
    def sentences(s):
        return {x.strip() for c in cuts[s] for x in re.split(r"[.?]", _sup(c).custom[P_KEY]) if len(x.split()) >= 4}

    for s in ("dev", "test"):
        assert not sentences("train") & sentences(s), s
    assert not sentences("dev_ood") & sentences("test_ood")


def test_questions_are_represented(corpus, cuts):
    q_train = [c for c in cuts["train"] if "?" in _sup(c).custom[P_KEY]]
    assert q_train
    stats = json.loads((corpus / "text" / "stats.json").read_text())
    assert stats["train"]["question_utterances"] == len(q_train)
    assert stats["train"]["utterances"] == len(cuts["train"])
    assert any("?" in _sup(c).custom[P_KEY] for s in ("dev", "test") for c in cuts[s])


# ---------------------------------------------------------------------------- tokenizer


def test_tokens_and_bpe_model(corpus, cuts):
    import sentencepiece as spm

    lang = corpus / "lang_bpe_120"
    lines = (lang / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["<blk> 0", "<sos/eos> 1", "<unk> 2"]
    assert len(lines) == 120
    sp = spm.SentencePieceProcessor(model_file=str(lang / "bpe.model"))
    assert sp.get_piece_size() == 120
    for i, line in enumerate(lines):
        piece, idx = line.rsplit(" ", 1)
        assert int(idx) == i and sp.id_to_piece(i) == piece
    unk = sp.unk_id()
    assert unk == 2
    for mark in (",", ".", "?"):
        assert sp.piece_to_id(mark) != unk, mark  # a piece of its own
        assert unk not in sp.encode(mark)
    for probe in ("Mister Darcy, is it? Yes.", "Quixote Zebra XYZ, Jane Austen.", "Is it?"):
        ids = sp.encode(probe)
        assert unk not in ids, probe
        assert sp.decode(ids) == probe  # case-sensitive
    for cut in cuts["train"]:
        sup = _sup(cut)
        assert unk not in sp.encode(sup.custom[P_KEY]) and unk not in sp.encode(sup.text)
    # trained on P and N together
    tw = (lang / "transcript_words.txt").read_text(encoding="utf-8").splitlines()
    some = _sup(cuts["train"][0])
    assert some.text in tw and some.custom[P_KEY] in tw


# ------------------------------------------------------------------------------ subsets


def test_filtered_cuts(corpus, cuts):
    from lhotse import load_manifest

    filtered = load_manifest(corpus / "fbank" / "synth_cuts_train_filtered.jsonl.gz")
    summary = json.loads((corpus / "subsets" / "subsets.json").read_text())
    train_ids = {c.id for c in cuts["train"]}
    assert {c.id for c in filtered} <= train_ids
    assert summary["num_cuts"] == len(filtered)
    assert summary["num_cuts"] + sum(summary["removed"].values()) == len(cuts["train"])
    assert summary["num_with_p"] == sum(has_p(c) for c in filtered)
    assert summary["seed"] == 42
    for c in filtered:
        assert 1.0 <= c.duration <= 20.0


def test_punctuated_proportion_subsets(corpus):
    from lhotse import load_manifest

    filtered = load_manifest(corpus / "fbank" / "synth_cuts_train_filtered.jsonl.gz")
    ref = {c.id: c for c in filtered}
    with_p = [c.id for c in filtered if has_p(c)]
    K = len(with_p)
    assert K > 0
    ranking = sorted(with_p, key=lambda i: make_subsets.rank_key(42, i))
    summary = json.loads((corpus / "subsets" / "subsets.json").read_text())
    kept_sets = []
    for f in PROPORTIONS:
        name = make_subsets.subset_name(f)
        subset = load_manifest(corpus / "fbank" / f"synth_cuts_train_{name}.jsonl.gz")
        assert [c.id for c in subset] == [c.id for c in filtered]
        kept = {c.id for c in subset if has_p(c)}
        assert len(kept) == round(f * K)
        assert summary["subsets"][name] == {"proportion": f, "cuts_with_p": round(f * K)}
        listed = (corpus / "subsets" / f"punct_ids_{name}.txt").read_text().split()
        assert listed == sorted(listed) and set(listed) == kept
        assert kept == set(ranking[: len(kept)])  # a prefix of the seeded ranking
        for c in subset:
            sup, orig = _sup(c), _sup(ref[c.id])
            assert sup.text == orig.text  # N always kept
            assert c.num_frames == ref[c.id].num_frames
            if c.id in kept:
                assert sup.custom[P_KEY] == orig.custom[P_KEY]
                assert sup.custom[RAW_KEY] == orig.custom[RAW_KEY]
            else:
                assert P_KEY not in (sup.custom or {}) and RAW_KEY not in (sup.custom or {})
                assert get_p(sup) is None
                assert sup.custom["tts"] == orig.custom["tts"]  # other fields untouched
        kept_sets.append(kept)
    for bigger, smaller in zip(kept_sets, kept_sets[1:]):
        assert smaller <= bigger
    assert len(kept_sets[0]) == K and 0 < len(kept_sets[-1]) < K


# ------------------------------------------------------------------- statistics script


def test_manifest_stats_table(corpus, cuts):
    path = corpus / "fbank" / "synth_cuts_train.jsonl.gz"
    r = _run([PY, "local/manifest_stats.py", str(path)], timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("| manifest | utts | hours | speakers | words | with P | . | , | ? |")
    assert set(lines[1].replace("|", "")) == {"-"}
    assert len(lines) == 3
    cells = [x.strip() for x in lines[2].strip("|").split("|")]
    train = cuts["train"]
    assert cells[0] == "synth_cuts_train.jsonl.gz"
    assert int(cells[1]) == len(train)
    assert int(cells[3]) == len({_sup(c).speaker for c in train})
    assert int(cells[4]) == sum(len(_sup(c).text.split()) for c in train)
    assert int(cells[5]) == len(train)
    assert int(cells[8]) == sum(_sup(c).custom[P_KEY].count("?") for c in train)

    r = _run([PY, "local/manifest_stats.py", "--json", str(path)], timeout=120)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["utterances"] == len(train)
    assert row["duration_min"] <= row["duration_median"] <= row["duration_max"]


def test_add_readings_adds_other_voices_reading_the_training_text(corpus, cuts, tmp_path):
    """local/add_readings.py: --base's training cuts plus --readings' cuts by the named speakers
    whose text --base trains on; the others are counted and left out."""
    import gzip

    from lhotse import load_manifest

    base_p1 = [json.loads(x) for x in gzip.open(corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz", "rt")]
    speaker = base_p1[0]["supervisions"][0]["speaker"]
    own = [c for c in base_p1 if c["supervisions"][0]["speaker"] == speaker]
    other = next(c for c in base_p1 if c["supervisions"][0]["speaker"] != speaker)
    new_text = json.loads(json.dumps(own[0]))
    new_text["id"] = "elsewhere"
    new_text["supervisions"][0]["custom"][RAW_KEY] = "A sentence the base corpus never reads."
    readings = tmp_path / "readings"
    (readings / "fbank").mkdir(parents=True)
    with gzip.open(readings / "fbank" / "synth_cuts_train_p1.jsonl.gz", "wt") as f:
        for c in own + [other, new_text]:
            f.write(json.dumps(c) + "\n")
    out = tmp_path / "out"
    cmd = [PY, "local/add_readings.py", "--base", str(corpus), "--readings", str(readings),
           "--speakers", f"{speaker},nobody", "--out", str(out)]
    r = _run(cmd, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"added {len(own)}, " in r.stderr and "other speaker 1" in r.stderr and "text not in --base 1" in r.stderr
    assert "No added reading by nobody" in r.stderr
    for split in ("train", "train_p1"):
        got = load_manifest(out / "fbank" / f"synth_cuts_{split}.jsonl.gz")
        base = load_manifest(corpus / "fbank" / f"synth_cuts_{split}.jsonl.gz")
        assert len(got) == len(base) + len(own)
        assert [c.id for c in got][:len(base)] == [c.id for c in base]
    added = got[f"{own[0]['id']}_{speaker}"]
    assert _sup(added).text == own[0]["supervisions"][0]["text"] and _sup(added).id == added.id
    np.testing.assert_array_equal(added.load_features(), cuts["train"][own[0]["id"]].load_features())
    assert (out / "fbank" / "synth_cuts_dev.jsonl.gz").resolve() == (corpus / "fbank" / "synth_cuts_dev.jsonl.gz")
    assert (out / "lang_bpe_120" / "bpe.model").is_file() and (out / "punct_config.json").is_file()
    rows = (out / "stats.md").read_text().splitlines()
    assert rows[2].startswith(f"| synth_cuts_train.jsonl.gz | {len(cuts['train']) + len(own)} |") and len(rows) == 7
    # again: the same manifests; a corpus without the manifest, or --out on --base, is refused
    before = (out / "fbank" / "synth_cuts_train_p1.jsonl.gz").read_bytes()
    assert _run(cmd, timeout=300).returncode == 0
    assert gzip.decompress((out / "fbank" / "synth_cuts_train_p1.jsonl.gz").read_bytes()) == gzip.decompress(before)
    r = _run([PY, "local/add_readings.py", "--base", str(corpus), "--readings", str(tmp_path), "--out", str(out)])
    assert r.returncode != 0 and "has no fbank/synth_cuts_train_p1.jsonl.gz" in r.stderr
    r = _run([PY, "local/add_readings.py", "--base", str(corpus), "--readings", str(readings), "--out", str(corpus)])
    assert r.returncode != 0 and "directory of its own" in r.stderr


def test_join_corpora_shuffles_prefixed_corpora_and_keeps_n_only_for_named_sources(corpus, cuts, tmp_path):
    """local/join_corpora.py: the training cuts of both corpora (the second's ids prefixed), shuffled
    by --seed; the cuts of --n-only-sources lose their P reference, the others keep it."""
    import gzip

    from lhotse import load_manifest

    base = load_manifest(corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz")
    source = _sup(base[0]).custom["source"]
    named = {c.id for c in base if _sup(c).custom["source"] == source}
    assert 0 < len(named) < len(base)
    out = tmp_path / "out"
    cmd = [PY, "local/join_corpora.py", "--out", str(out), "--seed", "3", str(corpus), f"x-={corpus}",
           "--n-only-sources", f"{source},nothing"]
    r = _run(cmd, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"N only ({source}) {2 * len(named)}" in r.stderr and f"cuts {2 * len(base)}" in r.stderr
    assert "No cut has the text source nothing" in r.stderr
    got = load_manifest(out / "fbank" / "synth_cuts_train_p1.jsonl.gz")
    ids = [c.id for c in got]
    assert sorted(ids) == sorted([c.id for c in base] + [f"x-{c.id}" for c in base])
    assert ids[:len(base)] != [c.id for c in base]  # shuffled
    for c in got:
        orig = c.id[2:] if c.id.startswith("x-") else c.id
        sup = _sup(c)
        assert sup.id == c.id == sup.recording_id == c.recording.id
        assert sup.text == _sup(base[orig]).text
        assert has_p(c) == (orig not in named)
        if orig in named:
            assert RAW_KEY not in sup.custom
    x = got[f"x-{base[0].id}"]
    np.testing.assert_array_equal(x.load_features(), base[0].load_features())
    for split in ("test", "dev_ood"):
        link = out / "fbank" / f"synth_cuts_{split}.jsonl.gz"
        assert link.resolve() == corpus / "fbank" / f"synth_cuts_{split}.jsonl.gz"
    assert (out / "lang_bpe_120" / "bpe.model").is_file()
    assert (out / "stats.md").read_text().splitlines()[2].startswith(f"| synth_cuts_train_p1.jsonl.gz | {len(got)} |")
    # --drop-sources: the named source's cuts left out and counted, the rest as without it
    dropped = tmp_path / "dropped"
    r = _run([PY, "local/join_corpora.py", "--out", str(dropped), "--seed", "3", str(corpus),
              "--drop-sources", source], timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"dropped ({source}) {len(named)}" in r.stderr and f"cuts {len(base) - len(named)}" in r.stderr
    kept = load_manifest(dropped / "fbank" / "synth_cuts_train_p1.jsonl.gz")
    assert sorted(c.id for c in kept) == sorted(c.id for c in base if c.id not in named)
    assert all(has_p(c) for c in kept)
    r = _run([PY, "local/join_corpora.py", "--out", str(tmp_path / "both"), str(corpus),
              "--drop-sources", source, "--n-only-sources", source])
    assert r.returncode != 0 and "both N only and dropped" in r.stderr
    # the same seed gives the same manifest, another seed another order
    before = gzip.decompress((out / "fbank" / "synth_cuts_train_p1.jsonl.gz").read_bytes())
    assert _run(cmd, timeout=300).returncode == 0
    assert gzip.decompress((out / "fbank" / "synth_cuts_train_p1.jsonl.gz").read_bytes()) == before
    other = tmp_path / "other"
    assert _run([PY, "local/join_corpora.py", "--out", str(other), "--seed", "4", str(corpus), f"x-={corpus}"],
                timeout=300).returncode == 0
    assert [c.id for c in load_manifest(other / "fbank" / "synth_cuts_train_p1.jsonl.gz")] != ids
    # the same ids twice, a missing corpus, or --out on a corpus are refused
    r = _run([PY, "local/join_corpora.py", "--out", str(tmp_path / "dup"), str(corpus), str(corpus)])
    assert r.returncode != 0 and "twice" in r.stderr and "PREFIX=DIR" in r.stderr
    r = _run([PY, "local/join_corpora.py", "--out", str(tmp_path / "none"), str(corpus), f"x-={tmp_path}"])
    assert r.returncode != 0 and "has no fbank/DATASET_cuts_train_p1.jsonl.gz" in r.stderr
    # another dataset's training cuts (prepare.sh --dataset games writes games_cuts_train_p1) join too;
    # a directory holding the training cuts of two datasets is refused
    games = tmp_path / "games"
    (games / "fbank").mkdir(parents=True)
    (games / "fbank" / "games_cuts_train_p1.jsonl.gz").symlink_to(corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz")
    r = _run([PY, "local/join_corpora.py", "--out", str(tmp_path / "with_games"), "--base", str(corpus),
              str(corpus), f"g-={games}"], timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{games}: {len(base)} cuts" in r.stderr
    joined = load_manifest(tmp_path / "with_games" / "fbank" / "synth_cuts_train_p1.jsonl.gz")
    assert sorted(c.id for c in joined) == sorted([c.id for c in base] + [f"g-{c.id}" for c in base])
    (games / "fbank" / "custom_cuts_train_p1.jsonl.gz").symlink_to(corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz")
    r = _run([PY, "local/join_corpora.py", "--out", str(tmp_path / "two"), "--base", str(corpus), f"g-={games}"])
    assert r.returncode != 0 and "several datasets" in r.stderr and "games_cuts_train_p1" in r.stderr
    r = _run([PY, "local/join_corpora.py", "--out", str(corpus), str(corpus)])
    assert r.returncode != 0 and "directory of its own" in r.stderr


# ------------------------------------------------------------------------------ rerun


def test_rerun_skips_done_stages(synth_build, corpus):
    data_dir, _ = synth_build
    outputs = sorted((corpus / "fbank").glob("*")) + sorted((corpus / "audio").rglob("*.flac"))
    outputs += [corpus / "lang_bpe_120" / "bpe.model", corpus / "subsets" / "subsets.json"]
    outputs += sorted((corpus / "text").glob("*"))
    mtimes = {p: p.stat().st_mtime_ns for p in outputs}
    r = _prepare(data_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    for n, name in STAGES.items():
        assert f"Stage {n} ({name}): already done with the same options, skipping" in r.stdout
        assert f"Stage {n}: {name}" not in r.stdout
    assert "Stage 5: manifest statistics" in r.stdout
    assert "| synth_cuts_train.jsonl.gz |" in r.stdout
    changed = [str(p) for p, m in mtimes.items() if p.stat().st_mtime_ns != m]
    assert not changed, changed


def test_corpus_made_before_dev_ood_gets_it_added(corpus, cuts, tmp_path):
    """prepare.sh on a corpus whose stages were done before dev_ood existed: stages 0-2 add dev_ood
    (text, speech, fbank) and leave everything else as it was."""
    from lhotse import load_manifest

    old = tmp_path / "data" / "synth"
    shutil.copytree(corpus, old, symlinks=True)
    for f in [old / "text" / "dev_ood.jsonl", old / "fbank" / "synth_cuts_dev_ood.jsonl.gz",
              old / "fbank" / "synth_feats_dev_ood.lca"] + sorted((old / "manifests").glob("*_dev_ood.*")):
        f.unlink()
    shutil.rmtree(old / "audio" / "dev_ood")
    others = sorted(p for d in ("text", "manifests", "fbank") for p in (old / d).iterdir() if p.name != "stats.json")
    mtimes = {p: p.stat().st_mtime_ns for p in others}
    r = _run(["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(old.parent), "--stop-stage", "2"], timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for n, name in ((0, "text"), (1, "speech"), (2, "fbank")):
        assert f"Stage {n} ({name}): already done with the same options, skipping" in r.stdout
        assert f"Stage {n}: adding dev_ood to a corpus made without it" in r.stdout
    assert (old / "text" / "dev_ood.jsonl").read_bytes() == (corpus / "text" / "dev_ood.jsonl").read_bytes()
    got = load_manifest(old / "fbank" / "synth_cuts_dev_ood.jsonl.gz")
    assert [(c.id, _sup(c).speaker, _sup(c).text) for c in got] == \
        [(c.id, _sup(c).speaker, _sup(c).text) for c in cuts["dev_ood"]]
    assert all(c.load_features().shape == (c.num_frames, 80) for c in got)
    assert [str(p) for p, m in mtimes.items() if p.stat().st_mtime_ns != m] == []
    stats = [json.loads((d / "text" / "stats.json").read_text()) for d in (old, corpus)]
    assert stats[0] == stats[1]
    # once added, a rerun adds nothing
    r = _run(["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(old.parent), "--stop-stage", "2"], timeout=600)
    assert r.returncode == 0 and "adding dev_ood" not in r.stdout


# -------------------------------------------------------------------------- bad audio


def test_compute_fbank_skips_unreadable_audio(corpus, cuts, tmp_path):
    from lhotse import RecordingSet, load_manifest
    from lhotse.utils import fastcopy

    recs = load_manifest(corpus / "manifests" / "synth_recordings_dev.jsonl.gz")
    sups = load_manifest(corpus / "manifests" / "synth_supervisions_dev.jsonl.gz")
    bad_id = sorted(r.id for r in recs)[3]
    mdir = tmp_path / "manifests"
    adir = tmp_path / "audio"
    mdir.mkdir()
    adir.mkdir()
    new_recs = []
    for rec in recs:
        if rec.id == bad_id:
            src = Path(rec.sources[0].source)
            dst = adir / src.name
            shutil.copy(src, dst)
            dst.write_bytes(b"\x00garbage, not FLAC\xff" * 100)
            rec = fastcopy(rec, sources=[fastcopy(rec.sources[0], source=str(dst))])
        new_recs.append(rec)
    RecordingSet.from_recordings(new_recs).to_file(mdir / "bad_recordings_dev.jsonl.gz")
    sups.to_file(mdir / "bad_supervisions_dev.jsonl.gz")
    # the shared corpus still has its good file
    assert Path(recs[bad_id].sources[0].source).stat().st_size > 1000

    out = tmp_path / "fbank"
    r = _run([PY, "local/compute_fbank.py", "--manifest-dir", str(mdir), "--prefix", "bad", "--split", "dev",
              "--output-dir", str(out), "--num-threads", "1"], timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    done = load_manifest(out / "bad_cuts_dev.jsonl.gz")
    assert len(done) == len(cuts["dev"]) - 1
    assert bad_id not in {c.id for c in done}
    assert f"Skipping cut {bad_id}" in r.stderr
    assert "11 cuts, 1 skipped" in r.stderr
    # the other cuts get the same features as in the corpus
    ref = {c.id: c for c in cuts["dev"]}
    c = done[0]
    np.testing.assert_allclose(c.load_features(), ref[c.id].load_features(), atol=1e-3)


# ------------------------------------------------------------------- reproducible text


def test_prepare_synth_text_is_reproducible(tmp_path):
    def cmd(out, seed):
        return [PY, "local/prepare_synth_text.py", "--out-dir", str(out), "--train-hours", "0.01",
                "--dev-utts", "4", "--test-utts", "4", "--ood-utts", "4", "--dev-ood-utts", "4", "--seed", str(seed)]

    dirs = {"a": (tmp_path / "a", 7), "b": (tmp_path / "b", 7), "c": (tmp_path / "c", 8), "d": (tmp_path / "d", 7),
            "e": (tmp_path / "e", 7), "g": (tmp_path / "g", 7), "o": (tmp_path / "o", 7)}
    extra = {"d": ["--train-hours", "0.05"], "e": ["--train-question-readings", "3"], "g": ["--gcide-hours", "0.05"],
             "o": ["--splits", "dev_ood"]}
    procs = {k: subprocess.Popen(cmd(d, s) + extra.get(k, []), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, (d, s) in dirs.items()}
    for k, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    a, b, c = (dirs[k][0] for k in "abc")
    names = sorted(x.name for x in a.iterdir())
    assert names == ["dev.jsonl", "dev_ood.jsonl", "stats.json", "test.jsonl", "test_ood.jsonl", "train.jsonl"]
    assert sorted(x.name for x in b.iterdir()) == names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "train.jsonl").read_bytes() != (c / "train.jsonl").read_bytes()
    # more training text, same held-out sets (models trained on corpora of
    # different sizes are compared on them)
    d = dirs["d"][0]
    assert len((d / "train.jsonl").read_text().splitlines()) > len((a / "train.jsonl").read_text().splitlines())
    for name in ("dev.jsonl", "test.jsonl", "test_ood.jsonl", "dev_ood.jsonl"):
        assert (a / name).read_bytes() == (d / name).read_bytes(), name
    # dev_ood: other Moby Dick text than test_ood's; written alone, the same utterances
    ood = {n: [json.loads(x) for x in (a / f"{n}.jsonl").read_text().splitlines()] for n in ("test_ood", "dev_ood")}
    assert 0 < len(ood["dev_ood"]) <= 4 and {u["source"] for u in ood["dev_ood"]} == {"mobydick"}
    assert not {u["text_raw"] for u in ood["dev_ood"]} & {u["text_raw"] for u in ood["test_ood"]}
    o = dirs["o"][0]
    assert sorted(x.name for x in o.iterdir()) == ["dev_ood.jsonl", "stats.json"]
    assert (o / "dev_ood.jsonl").read_bytes() == (a / "dev_ood.jsonl").read_bytes()
    assert set(json.loads((o / "stats.json").read_text())) == {"dev_ood"}
    train = [json.loads(x) for x in (a / "train.jsonl").read_text().splitlines()]
    assert train and all(u["id"] == f"train-{i:06d}" for i, u in enumerate(train))
    assert len([json.loads(x) for x in (a / "dev.jsonl").read_text().splitlines()]) == 4
    # questions read 3 times: the same text before, each question twice more after, same held-out sets
    e = dirs["e"][0]
    for name in ("dev.jsonl", "test.jsonl", "test_ood.jsonl"):
        assert (a / name).read_bytes() == (e / name).read_bytes(), name
    train_e = [json.loads(x) for x in (e / "train.jsonl").read_text().splitlines()]
    assert train_e[: len(train)] == train
    questions = [u for u in train if u["has_question"]]
    assert questions
    by_id = {u["id"]: u for u in train}
    copies = train_e[len(train):]
    assert len(copies) == 2 * len(questions)
    assert all(u["id"] == f"train-{i:06d}" for i, u in enumerate(train_e))
    for u in copies:
        first = by_id[u["first_reading"]]
        assert first["has_question"] and (u["tts_text"], u["text_raw"]) == (first["tts_text"], first["text_raw"])
    stats_e = json.loads((e / "stats.json").read_text())["train"]
    assert stats_e["question_utterances"] == 3 * len(questions) and stats_e["utterances"] == len(train_e)
    # Webster's 1913 after the Austen text: the same Austen utterances and ids, same held-out sets
    g = dirs["g"][0]
    for name in ("dev.jsonl", "test.jsonl", "test_ood.jsonl"):
        assert (a / name).read_bytes() == (g / name).read_bytes(), name
    train_g = [json.loads(x) for x in (g / "train.jsonl").read_text().splitlines()]
    assert train_g[: len(train)] == train
    added = train_g[len(train):]
    assert added and all(u["source"] == "gcide" for u in added)
    assert 0.04 <= sum(u["num_words"] for u in added) / 3.0 / 3600 <= 0.07  # --gcide-hours 0.05 at 3 words/s
    held_out = {json.loads(x)["text_raw"] for n in ("dev", "test", "test_ood")
                for x in (a / f"{n}.jsonl").read_text().splitlines()}
    assert not held_out & {u["text_raw"] for u in added}
    bad = subprocess.run(cmd(tmp_path / "f", 7) + ["--train-question-readings", "0"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "--train-question-readings must be >= 1" in bad.stderr
    bad = subprocess.run(cmd(tmp_path / "f", 7) + ["--splits", "dev,nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "--splits: choose among" in bad.stderr and not (tmp_path / "f").exists()
