"""``python -m zipformer_pc.score`` (``zpc-score``): score a hypothesis file against its references with every
metric; the options and usage are in :mod:`zipformer_pc.scoring.score` (``scoring/score.py`` is the same)."""

import sys

from zipformer_pc.scoring import score


def get_parser():
    return score.get_parser()


def main(argv=None) -> int:
    return score.main(argv)


if __name__ == "__main__":
    sys.exit(main())
