"""The one exception type for problems the user can fix (bad files, bad config)."""


class AttnmtError(Exception):
    """A user-facing error: the CLI prints its message and exits with code 2, no traceback."""
