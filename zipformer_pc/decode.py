"""``python -m zipformer_pc.decode`` (``zpc-decode``): decode test sets with PyTorch and write the results;
the options and usage are in :mod:`zipformer_pc.decoding.decode` (``python -m zipformer_pc.decoding.decode``
is the same command)."""

from zipformer_pc.decoding import decode


def get_parser():
    return decode.get_parser()


def main(argv=None):
    return decode.main(argv)


if __name__ == "__main__":
    main()
