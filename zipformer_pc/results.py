"""``python -m zipformer_pc.results`` (``zpc-results``): write a recipe's RESULTS.md and figures from its
outputs; the options and usage are in :mod:`zipformer_pc.scoring.make_results` (``scoring/make_results.py``
is the same command)."""

from zipformer_pc.scoring import make_results


def get_parser():
    return make_results.get_parser()


def main(argv=None):
    return make_results.main(argv)


if __name__ == "__main__":
    main()
