#!/usr/bin/env python3
"""Print the P (punctuated-cased) or N (normalized) form of transcripts.

Usage:
  echo 'He said: \u201cDon\u2019t!\u201d' | ./local/normalize_text.py --form N
  ./local/normalize_text.py --form P --punct-map '!>.' --has-ids true < text > text.P

With ``--has-ids true`` each line is ``utt_id<TAB>text`` and the id is kept.
Uses zipformer_pc.text, the recipe's one normalization.
"""

import argparse
import sys

from zipformer_pc.text import normalized, parse_punct_args, punctuated
from zipformer_pc.options import str2bool


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--form", choices=["P", "N"], required=True)
    p.add_argument("--has-ids", type=str2bool, default=False, help="Lines are utt_id<TAB>text")
    p.add_argument("--punct-keep", default=None, help="Marks kept in P (default: '. , ?')")
    p.add_argument("--punct-map", default=None, help="e.g. '!>. ;>,'")
    return p


def main() -> None:
    args = get_parser().parse_args()
    config = parse_punct_args(args.punct_keep, args.punct_map)
    for line in sys.stdin:
        line = line.rstrip("\n")
        prefix = ""
        if args.has_ids:
            utt_id, _, line = line.partition("\t")
            prefix = utt_id + "\t"
        out = punctuated(line, config) if args.form == "P" else normalized(line)
        sys.stdout.write(prefix + out + "\n")


if __name__ == "__main__":
    main()
