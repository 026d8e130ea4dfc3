"""recon's exit codes, and the exceptions that carry them: a message shown as one line on stderr.

One table for every command (stated in ``--help``, tested row by row):
"""

DONE = 0  # the command did what was asked (a scan with no findings is done, too)
NOTHING = 1  # nothing found or nothing to do: a query without an answer, apply with nothing to change
BAD_INPUT = 2  # the input cannot be used: path, version, revision, device, model, rule, profile
CRASHED = 3  # a check (or recon itself) crashed: named; the other rules' findings are still written

EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 nothing found or nothing to do (a query with no answer: unknown symbol, ambiguous name, "
    "no path; apply with nothing to change); 2 bad input (path, version, revision, device, model, rule or profile, "
    "a checkout apply refuses, a usage error); "
    "3 a check crashed (named; the other findings are still written); "
    "130 interrupted by Ctrl-C (one line on stderr)."
)


class ReconError(Exception):
    """Bad input or an unusable target: the CLI prints the message and exits with ``exit_code``."""

    exit_code = BAD_INPUT


class NothingToDo(ReconError):
    """A well-formed request with no answer or nothing to change."""

    exit_code = NOTHING
