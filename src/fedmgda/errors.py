"""The error every configuration check raises, in a module of its own that imports nothing.

The catalog (names and hyper-parameter ranges), the run config and the registry all raise
:class:`ConfigError`; keeping it here lets them depend on each other in one direction only
(errors <- catalog <- config <- experiments, see the README's module map).
"""


class ConfigError(ValueError):
    """An invalid configuration; the message names the offending key."""
