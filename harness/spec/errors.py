"""The one error a suite raises: ``SpecError``, whose message names the file, the case and
the field (the CLI prints it and exits 2)."""


class SpecError(Exception):
    """A suite that cannot be run, with a message naming the file and the field."""
