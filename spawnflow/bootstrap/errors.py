"""The base of errors the user can fix: the CLI prints their one sentence, no traceback."""


class UserError(Exception):
    """Caused by input or surroundings the user controls (a setting, a URL, a server).

    The message is one sentence that names what is wrong and where it came from.
    """
