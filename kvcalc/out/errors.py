"""Error types and the exit codes they map to.

Exit codes (the CLI's contract): 0 fine, 1 a ``--check`` failed, 2 bad input, 3 an internal error (a bug in
kvcalc: one line asking to report it, never a traceback), 130 interrupted (Ctrl-C, as shells expect: 128 + SIGINT).
Every error carries a one-line message that names the bad field, file or line.
"""

from __future__ import annotations

EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class KvcalcError(Exception):
    """Base of every error kvcalc reports to a user (never shown as a traceback)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InputError(KvcalcError):
    """Bad user input: a value, an option, a file's content. Exit code 2."""


class PresetNotFound(InputError):
    """An unknown preset name; the message lists close matches."""
