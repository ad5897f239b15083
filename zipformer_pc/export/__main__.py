"""``python -m zipformer_pc.export`` (``zpc-export``): export a trained causal model to ONNX for streaming;
the options and usage are in :mod:`zipformer_pc.export.onnx_export`."""

from zipformer_pc.export import onnx_export


def get_parser():
    return onnx_export.get_parser()


def main(argv=None):
    return onnx_export.main(argv)


if __name__ == "__main__":
    main()
