"""``python -m zipformer_pc.train`` (``zpc-train``): train a model; the options and usage are in
:mod:`zipformer_pc.training.train` (``python -m zipformer_pc.training.train`` is the same command)."""

from zipformer_pc.training import train


def get_parser():
    return train.get_parser()


def main(argv=None):
    return train.main(argv)


if __name__ == "__main__":
    main()
