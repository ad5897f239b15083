"""``python -m zipformer_pc.serve`` (``zpc-serve``; also ``python -m zipformer_pc.server``): an exported model
served over WebSocket with the microphone page; the options are in :mod:`zipformer_pc.server.__main__`."""

from zipformer_pc.server import __main__ as server


def get_parser():
    return server.get_parser()


def main(argv=None):
    return server.main(argv)


if __name__ == "__main__":
    main()
