#!/usr/bin/env python3
"""Check that a recipe command's arguments parse, without running the command.

Usage:
  # one command: a module (as for python -m) or a script path, then its arguments
  python tools/check_args.py zipformer_pc.training.train --train-cuts a.jsonl.gz --valid-cuts b.jsonl.gz \
      --bpe-model bpe.model --exp-dir exp/x --model-type conditioned
  python tools/check_args.py -m zipformer_pc.decoding.decode --exp-dir exp/x --bpe-model bpe.model --test-sets t=t.jsonl.gz
  python tools/check_args.py -m zipformer_pc.export --exp-dir exp/x --tokens tokens.txt --int8 true
  python tools/check_args.py prepare.sh --dataset librispeech --stage 0 --stop-stage 6

  # many commands, one a line, as they would be run (what `egs/librispeech/run.sh --dry-run true` does)
  python tools/check_args.py --commands-file cmds.txt --allow-missing scoring/measure_rtf.py

How a Python target is checked: its source is read first and must define a
top-level ``get_parser()``; it is refused (nothing imported) when it has none,
or when its module level calls a function outside the
``if __name__ == "__main__":`` guard (importing it would run code).  The
module is then imported under its own name (``__name__`` is never
``"__main__"``, so its ``main()`` does not run), ``get_parser()`` is called
and the arguments go through ``parse_args``.  Only what argparse checks is
checked (option names, required options, ``choices``, ``type`` conversions):
that files exist, say, is up to the script when it really runs.

A shell target (``*.sh``) is checked the way ``tools/parse_options.sh``
reads options: every ``--name value`` / ``--name=value`` must name a
variable the script sets before it sources parse_options.sh (a little
stricter than parse_options.sh itself, which accepts any defined variable);
a script that sets ``pass_to=OTHER.sh`` there (the recipes: prepare.sh) also
takes OTHER.sh's options, which it hands on to it.

In a commands file each line is split like a shell line (``shlex``); a
leading interpreter (``python``, ``python3``, a path to one, ``bash``) is
dropped and ``-m MODULE`` is understood.  Blank lines and ``#`` comments are
skipped.

Exit codes: 0 every command parses (or was skipped as allowed-missing);
2 argparse rejected the arguments (single command; its message is printed);
3 the target cannot be checked (missing, no get_parser(), unsafe to import);
1 some command of a commands file failed.
"""

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]

EXIT_BAD_ARGS = 2
EXIT_CANNOT_CHECK = 3
EXIT_BATCH_FAILED = 1
EXIT_MISSING = -1  # internal: the target does not exist (EXIT_CANNOT_CHECK unless allowed)

OWN_VALUE_OPTIONS = ("--commands-file", "--allow-missing", "-m", "--module")


class CannotCheck(Exception):
    """The target cannot be checked (missing, no get_parser(), unsafe)."""


class Missing(CannotCheck):
    """The target does not exist."""


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [--allow-missing LIST] (TARGET | -m MODULE) [ARGS...] | --commands-file FILE",
    )
    p.add_argument("--commands-file", default=None, help="check every command of this file (one a line)")
    p.add_argument("--allow-missing", default="",
                   help="comma list of targets (script paths or modules) that may be absent: reported and skipped")
    p.add_argument("-m", "--module", default=None, help="the target is this module (as for python -m)")
    p.add_argument("target", nargs="?", default=None, help="module name, script path (.py) or shell script (.sh)")
    return p


# ----------------------------------------------------------------- targets


def strip_interpreter(argv: Sequence[str]) -> List[str]:
    """``python3 -m mod ARGS`` -> ``-m mod ARGS``; ``bash x.sh ARGS`` -> ``x.sh ARGS``."""
    argv = list(argv)
    if argv:
        head = os.path.basename(argv[0])
        if re.fullmatch(r"python[0-9.]*|bash|sh", head) or argv[0] == sys.executable:
            argv = argv[1:]
    return argv


def split_target(argv: Sequence[str]) -> Tuple[str, List[str]]:
    """The target and its arguments from ``[-m] TARGET ARGS...``."""
    argv = list(argv)
    if not argv:
        raise CannotCheck("no command given")
    if argv[0] in ("-m", "--module"):
        if len(argv) < 2:
            raise CannotCheck("-m needs a module name")
        return argv[1], argv[2:]
    return argv[0], argv[1:]


def is_path_like(target: str) -> bool:
    return target.endswith((".py", ".sh")) or "/" in target or os.sep in target


def resolve_path(target: str) -> Path:
    p = Path(target)
    for cand in ([p] if p.is_absolute() else [Path.cwd() / p, ROOT / p]):
        if cand.is_file():
            return cand.resolve()
    raise Missing(f"{target} does not exist")


def module_file(name: str) -> Tuple[str, Path]:
    """The module ``python -m name`` runs (a package's ``__main__``) and its source file."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            name += ".__main__"
            spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        raise Missing(f"module {name} cannot be found ({e})") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise Missing(f"module {name} cannot be found")
    return name, Path(spec.origin)


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    names = [node.test.left] + list(node.test.comparators)
    has_name = any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
    has_main = any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names)
    return has_name and has_main


def inspect_source(path: Path, shown: str) -> None:
    """Refuse a script without get_parser() or whose import would run a call."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise CannotCheck(f"{shown}: cannot read its source ({e})") from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "get_parser" for n in tree.body):
        raise CannotCheck(f"{shown} has no top-level get_parser(): its arguments cannot be checked without running it")
    # a module-level call of the script's own functions (an unguarded main()) or of
    # sys.exit would run the script on import; calls such as logging.getLogger are harmless
    own_funcs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for n in tree.body:
        if not isinstance(n, ast.Expr):
            continue
        for c in ast.walk(n):
            if not isinstance(c, ast.Call):
                continue
            f = c.func
            name = f.id if isinstance(f, ast.Name) else None
            dotted = None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                dotted = f"{f.value.id}.{f.attr}"
            if name in own_funcs or name in ("exit", "quit") or dotted in ("sys.exit", "os._exit"):
                raise CannotCheck(f"{shown} calls {name or dotted}() at import time (line {n.lineno}, outside "
                                  f"the __main__ guard): refusing to import it")


_parsers: Dict[str, argparse.ArgumentParser] = {}


def load_parser(target: str) -> argparse.ArgumentParser:
    """``get_parser()`` of a module or script, imported without running its main."""
    if target in _parsers:
        return _parsers[target]
    if is_path_like(target):
        path = resolve_path(target)
        inspect_source(path, target)
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        mod_name = "_check_args_" + re.sub(r"\W", "_", str(shown))
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise CannotCheck(f"{target}: cannot be loaded as a Python file")
        module = importlib.util.module_from_spec(spec)
        # the target imports zipformer_pc as installed (pip install -e .); a
        # script that imports a sibling script by name cannot be checked
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:  # an import error in the target is reported, not a crash
            sys.modules.pop(mod_name, None)
            raise CannotCheck(f"{target}: importing it failed: {type(e).__name__}: {e}") from None
    else:
        name, path = module_file(target)
        inspect_source(path, target)
        try:
            module = importlib.import_module(name)
        except (Exception, SystemExit) as e:
            raise CannotCheck(f"{target}: importing it failed: {type(e).__name__}: {e}") from None
    try:
        parser = module.get_parser()
    except Exception as e:
        raise CannotCheck(f"{target}: get_parser() failed: {type(e).__name__}: {e}") from None
    if not isinstance(parser, argparse.ArgumentParser):
        raise CannotCheck(f"{target}: get_parser() returned {type(parser).__name__}, not an ArgumentParser")
    parser.prog = target
    _parsers[target] = parser
    return parser


# ---------------------------------------------------------- shell scripts


def shell_option_names(path: Path) -> List[str]:
    """Variables a recipe script sets (``name=...``) or declares without a value
    (``declare name``: an option whose unset and empty values differ) before it
    sources parse_options.sh, and those of the script its ``pass_to=`` names
    (the options it passes through)."""
    names: List[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"\s*(\.|source)\s+\S*parse_options\.sh\b", line):
            return names
        m = re.match(r"pass_to=(\S+)", line)
        if m:
            names += shell_option_names(ROOT / m.group(1).strip("\"'"))
            continue
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)=|declare\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:#|$)", line)
        if m:
            names.append(m.group(1) or m.group(2))
    raise CannotCheck(f"{path.name} does not source tools/parse_options.sh: its options cannot be checked")


def check_shell(target: str, args: Sequence[str]) -> str:
    """Parse ``args`` as parse_options.sh would; returns an error message or ''."""
    names = set(shell_option_names(resolve_path(target)))
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            return ""
        if a.startswith("--") and "=" in a:
            opt = a.split("=", 1)[0]
            i += 1
        elif a.startswith("--"):
            opt = a
            if i + 1 >= len(args):
                return f"{target}: option {opt} needs a value"
            i += 2
        else:
            return f"{target}: unexpected argument '{a}' (options look like --name value)"
        if opt[2:].replace("-", "_") not in names:
            return f"{target}: unknown option {opt}"
    return ""


# ------------------------------------------------------------------ checks


def check(target: str, args: Sequence[str]) -> Tuple[int, str]:
    """(exit code, message) for one command; never raises for a bad command."""
    try:
        if target.endswith(".sh"):
            msg = check_shell(target, args)
            return (EXIT_BAD_ARGS, msg) if msg else (0, "")
        parser = load_parser(target)
    except Missing as e:
        return EXIT_MISSING, str(e)
    except CannotCheck as e:
        return EXIT_CANNOT_CHECK, str(e)
    err = io.StringIO()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            parser.parse_args(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_ARGS)
        if code != 0:
            return code, err.getvalue().strip() or f"{target}: arguments rejected"
    return 0, ""


def display(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def is_allowed_missing(target: str, allowed: Sequence[str]) -> bool:
    for a in allowed:
        if target == a or (is_path_like(target) and is_path_like(a)
                           and Path(target).as_posix().endswith(Path(a).as_posix())):
            return True
    return False


def run_one(argv: Sequence[str], allowed: Sequence[str]) -> int:
    try:
        target, args = split_target(strip_interpreter(argv))
    except CannotCheck as e:
        print(f"check_args: {e}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    code, msg = check(target, args)
    if code == EXIT_MISSING:
        if is_allowed_missing(target, allowed):
            print(f"SKIPPED {target}: it does not exist yet (allowed missing); its arguments were not checked")
            return 0
        code = EXIT_CANNOT_CHECK
    if code == 0:
        print(f"OK {target}: {len(args)} argument(s) parse (nothing was run)")
        return 0
    print(msg, file=sys.stderr)
    what = "cannot be checked" if code == EXIT_CANNOT_CHECK else "arguments do not parse"
    print(f"check_args: {target}: {what}", file=sys.stderr)
    return code


def run_file(path: str, allowed: Sequence[str]) -> int:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        print(f"check_args: cannot read --commands-file: {e}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    n_ok = n_skip = 0
    failures: List[str] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            argv = shlex.split(line)
            target, args = split_target(strip_interpreter(argv))
        except (ValueError, CannotCheck) as e:
            failures.append(f"line {lineno}: {e}")
            print(f"FAIL line {lineno}: {line}\n     {e}")
            continue
        code, msg = check(target, args)
        if code == EXIT_MISSING and is_allowed_missing(target, allowed):
            n_skip += 1
            print(f"SKIP {display(argv)}\n     {target} does not exist yet (allowed missing): not checked")
        elif code == 0:
            n_ok += 1
            print(f"ok   line {lineno}: {target} ({len(args)} arguments)")
        else:
            failures.append(f"line {lineno}: {target}")
            # argparse's usage block is long: its "error:" line says what is wrong
            lines_ = [m for m in msg.splitlines() if "error:" in m] or msg.splitlines()
            indented = "\n".join("     " + m for m in lines_)
            print(f"FAIL {display(argv)}\n{indented}")
    total = n_ok + n_skip + len(failures)
    summary = f"check_args: {total} command(s): {n_ok} parse, {n_skip} skipped (missing), {len(failures)} failed"
    if failures:
        print(summary + ": " + "; ".join(failures), file=sys.stderr)
        return EXIT_BATCH_FAILED
    print(summary)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # check_args' own options come first; everything from the target on belongs to the target
    own: List[str] = []
    while argv and (argv[0] in OWN_VALUE_OPTIONS or argv[0].split("=", 1)[0] in OWN_VALUE_OPTIONS
                    or argv[0] in ("-h", "--help")):
        if argv[0] in ("-h", "--help"):
            get_parser().print_help()
            return 0
        if argv[0] in ("-m", "--module"):
            break  # -m MODULE starts the command
        if "=" in argv[0]:
            own.append(argv.pop(0))
        else:
            if len(argv) < 2:
                get_parser().error(f"{argv[0]} needs a value")
            own += [argv.pop(0), argv.pop(0)]
    opts = get_parser().parse_args(own)
    allowed = [a for a in opts.allow_missing.split(",") if a]
    if opts.commands_file:
        if argv:
            get_parser().error("give either --commands-file or one command, not both")
        return run_file(opts.commands_file, allowed)
    if not argv:
        get_parser().error("give a target (module, script path or .sh) and its arguments, or --commands-file")
    return run_one(argv, allowed)


if __name__ == "__main__":
    sys.exit(main())
