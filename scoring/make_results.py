#!/usr/bin/env python3
"""``python -m zipformer_pc.results`` (``zpc-results``) under its older path: the code is
:mod:`zipformer_pc.scoring.make_results`, whose docstring has the usage."""

from zipformer_pc.scoring import make_results


def get_parser():
    """The results' parser (a top-level function, so tools/check_args.py can check calls of this script)."""
    return make_results.get_parser()


if __name__ == "__main__":
    make_results.main()
