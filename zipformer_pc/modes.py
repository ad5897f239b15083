"""Output modes and, per model type, which modes it searches, derives or restores.

Every output of the recipe is one of two *modes*:

* ``N`` (id ``MODE_N = 0``): normalized, lowercase, no punctuation;
* ``P`` (id ``MODE_P = 1``): punctuated and cased.

The ids are what the conditioned predictor embeds (``zipformer_pc.model.decoder``)
and what training, decoding and export pass around; the names are what files,
ONNX metadata, command lines and transcripts use (``decoder-P.onnx``,
``--modes N,P``, ``{"P": ..., "N": ...}``).

Per model type (``--model-type``) a mode is reached in one of three ways:

* *searched*: the model has a predictor + joiner for it (a head, or the
  conditioned head with that mode's embedding), so beam/greedy search
  produces it and the export writes ``decoder-MODE``/``joiner-MODE``;
* *derived*: computed from another mode's text, with no search: a ``punct``
  model's N is :func:`zipformer_pc.text.normalized` of its P;
* *restorable*: only with a separate restoration model (the cascade): a
  ``norm`` model's N restored to P by ``zipformer_pc.restoration``.

This module imports nothing heavy (no torch, no lhotse, not even
``zipformer_pc.text`` until :func:`derive` runs): the streaming runtime
uses it.
"""

from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Tuple

MODE_N = 0  # normalized: lowercase, no punctuation
MODE_P = 1  # punctuated and cased

#: id -> name and name -> id
MODE_NAMES: Dict[int, str] = {MODE_N: "N", MODE_P: "P"}
MODE_IDS: Dict[str, int] = {name: mode for mode, name in MODE_NAMES.items()}

#: the order the streaming runtime looks for, searches and reports modes
#: (its transcripts and ``--output`` lines list P before N)
RUNTIME_ORDER: Tuple[str, ...] = ("P", "N")

#: a derived mode and the mode its text is computed from (N = normalized(P))
DERIVED_FROM: Dict[int, int] = {MODE_N: MODE_P}
#: a restorable mode and the mode a restoration model reads (P = restore(N))
RESTORED_FROM: Dict[int, int] = {MODE_P: MODE_N}


@dataclass(frozen=True)
class ModeRules:
    """How one model type reaches each mode (mode ids, in id order)."""

    searched: Tuple[int, ...]
    derived: Tuple[int, ...] = ()
    restorable: Tuple[int, ...] = ()

    def outputs(self, cascade: bool = False) -> List[int]:
        """Every mode the model gives (with ``cascade``: restorable ones too), in id order."""
        modes = set(self.searched) | set(self.derived)
        if cascade:
            modes |= set(self.restorable)
        return sorted(modes)


#: the four model types of ``zipformer_pc.model.transducer`` and their rules
RULES: Dict[str, ModeRules] = {
    "punct": ModeRules(searched=(MODE_P,), derived=(MODE_N,)),
    "norm": ModeRules(searched=(MODE_N,), restorable=(MODE_P,)),
    "two-decoder": ModeRules(searched=(MODE_N, MODE_P)),
    "conditioned": ModeRules(searched=(MODE_N, MODE_P)),
}
MODEL_TYPES: Tuple[str, ...] = tuple(RULES)


def rules(model_type: str) -> ModeRules:
    if model_type not in RULES:
        raise ValueError(f"unknown model type {model_type!r} (one of {', '.join(MODEL_TYPES)})")
    return RULES[model_type]


def searched_modes(model_type: str) -> List[int]:
    """Modes the model has a predictor + joiner for (trained, searched, exported), in id order."""
    return list(rules(model_type).searched)


def output_modes(model_type: str, cascade: bool = False) -> List[int]:
    """Modes a model type outputs: searched and derived (and restorable with ``cascade``), in id order."""
    return rules(model_type).outputs(cascade)


def search_mode_for(model_type: str, mode: int) -> int:
    """The searched mode whose output gives ``mode`` (itself, or the source of a derived mode)."""
    r = rules(model_type)
    if mode in r.searched:
        return mode
    if mode in r.derived:
        return DERIVED_FROM[mode]
    raise ValueError(f"a {model_type} model does not output mode {MODE_NAMES.get(mode, mode)} by search")


def is_derived(model_type: str, mode: int) -> bool:
    return mode in rules(model_type).derived


def derive(mode: int, source_text: str) -> str:
    """The text of derived ``mode`` from the text of its source mode (``DERIVED_FROM``)."""
    if DERIVED_FROM.get(mode) == MODE_P:
        from zipformer_pc.text import normalized  # pure Python

        return normalized(source_text)
    raise ValueError(f"mode {MODE_NAMES.get(mode, mode)} is not derived from another mode")


def add_derived(model_type: str, outputs: Mapping[str, str]) -> Dict[str, str]:
    """``outputs`` (texts by mode name) plus the derived modes of ``model_type`` whose source is there.

    An unknown or empty model type (an export without ``transducer_type``)
    derives nothing.
    """
    res = dict(outputs)
    if model_type not in RULES:
        return res
    for mode in RULES[model_type].derived:
        name, source = MODE_NAMES[mode], MODE_NAMES[DERIVED_FROM[mode]]
        if name not in res and source in res:
            res[name] = derive(mode, res[source])
    return res


def mode_id(name: str) -> int:
    if name not in MODE_IDS:
        raise ValueError(f"unknown output mode {name!r} (one of {', '.join(MODE_IDS)})")
    return MODE_IDS[name]


def parse_modes(spec: str) -> List[int]:
    """Mode ids of a comma list of names (``"N,P"``), in the order given."""
    return [mode_id(m) for m in spec.split(",") if m]


def names(modes: Sequence[int]) -> List[str]:
    return [MODE_NAMES[m] for m in modes]
