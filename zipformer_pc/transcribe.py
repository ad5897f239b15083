"""``python -m zipformer_pc.transcribe`` (``zpc-transcribe``): streaming recognition of wav files or a cut
manifest with the exported ONNX models; the options and usage are in :mod:`zipformer_pc.runtime.cli`."""

from zipformer_pc.runtime import cli


def get_parser():
    return cli.get_parser()


def main(argv=None):
    return cli.main(argv)


if __name__ == "__main__":
    main()
