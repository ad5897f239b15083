"""zipformer_pc.modes: the one place for mode ids, names and the per-model-type rules."""

import subprocess
import sys

import pytest

from zipformer_pc import modes
from zipformer_pc.modes import MODE_N, MODE_P


def test_ids_and_names_round_trip():
    assert (MODE_N, MODE_P) == (0, 1)  # the conditioned predictor's embedding rows: never renumber
    assert modes.MODE_NAMES == {0: "N", 1: "P"}
    assert all(modes.mode_id(modes.MODE_NAMES[m]) == m for m in modes.MODE_NAMES)
    assert modes.parse_modes("N,P") == [MODE_N, MODE_P] and modes.parse_modes("P") == [MODE_P]
    with pytest.raises(ValueError, match="unknown output mode"):
        modes.parse_modes("N,X")


@pytest.mark.parametrize("model_type, searched, outputs, cascade", [
    ("punct", [MODE_P], [MODE_N, MODE_P], [MODE_N, MODE_P]),
    ("norm", [MODE_N], [MODE_N], [MODE_N, MODE_P]),
    ("two-decoder", [MODE_N, MODE_P], [MODE_N, MODE_P], [MODE_N, MODE_P]),
    ("conditioned", [MODE_N, MODE_P], [MODE_N, MODE_P], [MODE_N, MODE_P]),
])
def test_rules_per_model_type(model_type, searched, outputs, cascade):
    assert modes.searched_modes(model_type) == searched
    assert modes.output_modes(model_type) == outputs
    assert modes.output_modes(model_type, cascade=True) == cascade
    for m in outputs:
        src = modes.search_mode_for(model_type, m)
        assert src in searched and (src == m) != modes.is_derived(model_type, m)


def test_model_types_are_the_models():
    from zipformer_pc.model.transducer import MODEL_TYPES, modes_of

    assert MODEL_TYPES == ("punct", "norm", "two-decoder", "conditioned")
    assert {t: modes_of(t) for t in MODEL_TYPES} == {t: modes.searched_modes(t) for t in MODEL_TYPES}
    with pytest.raises(ValueError, match="unknown model type"):
        modes.searched_modes("cascade")


def test_derived_n_is_the_normalization_of_p():
    from zipformer_pc.text import normalized

    p = "Hello, Mister Smith! How are you?"
    assert modes.derive(MODE_N, p) == normalized(p)
    with pytest.raises(ValueError):
        modes.derive(MODE_P, "hello")
    assert modes.add_derived("punct", {"P": p}) == {"P": p, "N": normalized(p)}
    assert list(modes.add_derived("punct", {"P": p})) == ["P", "N"]  # the runtime's order: P first
    for model_type in ("conditioned", "norm", "", "unknown"):  # nothing derived (empty: an old export)
        assert modes.add_derived(model_type, {"P": p}) == {"P": p}


def test_modes_imports_nothing_heavy():
    code = ("import sys; import zipformer_pc.modes as m; m.derive(m.MODE_N, 'A b.'); "
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'lhotse', 'numpy')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
