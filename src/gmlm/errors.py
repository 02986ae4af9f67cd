"""The one exception type the command line turns into a clean message (no traceback)."""


class GmlmError(Exception):
    """A problem the user can fix: bad input, missing file, invalid option.

    The message must name the argument, file or line at fault and, where possible, the fix.
    """
