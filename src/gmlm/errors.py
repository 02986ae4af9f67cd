"""The one exception type the command line turns into a clean message (no traceback)."""


class GmlmError(Exception):
    """A problem the user can fix: bad input, missing file, invalid option.

    The message must name the argument, file or line at fault and, where possible, the fix.
    """


class Stopped(GmlmError):
    """A run stopped on request (a signal) after saving what it had done; the command line
    prints the message (how to resume) and exits with 128 + the signal's number, as a process
    ended by that signal would."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
