"""The commands that live in the command-line package, one module each (``add_parser(sub)`` +
``run(args) -> int``); harness/cli/parser.py registers them."""
