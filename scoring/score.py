#!/usr/bin/env python3
"""``python -m zipformer_pc.score`` (``zpc-score``) under its older path: the code is
:mod:`zipformer_pc.scoring.score`, whose docstring has the usage."""

import sys

from zipformer_pc.scoring import score


def get_parser():
    """The scorer's parser (a top-level function, so tools/check_args.py can check calls of this script)."""
    return score.get_parser()


if __name__ == "__main__":
    sys.exit(score.main())
