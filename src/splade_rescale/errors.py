"""The error of a bad configuration, in a leaf module that every layer can import."""


class ConfigError(ValueError):
    """A configuration problem, described in one line naming the key, the value and the fix."""
