"""The one exception recon raises for bad input: its message is shown as one line."""


class ReconError(Exception):
    """Bad input or an unusable target: the CLI prints the message and exits non-zero."""

    exit_code = 2
