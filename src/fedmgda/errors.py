"""The error every configuration check raises, the ones of an inconsistent experiment registry and
of a malformed claim, the one of a broken algorithm hook, the one of a run folder the trainer
cannot use and the one of data (raw files, partitions), in a module of its own that imports
nothing (but the standard library), and how a deprecation is announced (:func:`warn_deprecated`).

The catalog (names and hyper-parameter ranges), the run config and the registry all raise
:class:`ConfigError`; keeping it here lets them depend on each other in one direction only
(errors <- catalog <- config <- experiments, see the README's module map).
"""

import sys
import warnings


class ConfigError(ValueError):
    """An invalid configuration; the message names the offending key."""


class RegistryError(ValueError):
    """An inconsistent experiment registry; the message names the experiment/entry."""


class ClaimError(RegistryError):
    """A malformed claim; the message names it."""


class DataError(Exception):
    """A raw file is missing, corrupt or cannot be downloaded, or a dataset option or partition is
    invalid (raised by ``fedmgda.data`` and the partitioners, ``fedmgda.partitioners``)."""


class PluginError(Exception):
    """An algorithm's hook returned what its contract (docs/plugins.md) does not allow, or a
    plug-in's hook raised; the message names the algorithm, the hook and what was expected.
    The run it belongs to (``owner``, when it is raised outside the run's own generator) is
    recorded as failed; the other runs of its pack go on."""

    def __init__(self, message: str, owner: object = None):
        super().__init__(message)
        self.owner = owner


class RunFolderError(Exception):
    """A run folder the trainer cannot use as it is: an unreadable checkpoint, another trainer
    writing it, a file it cannot write (a full disk, a read-only folder); or one a reader cannot
    trust (``fedmgda.results.open_run``): an unreadable, cut or changed result file, another run's
    config. The message is one line naming the folder or file, what is wrong and what to do;
    ``fedmgda train`` and the workflow's commands print it and exit with status 2, as for a
    ConfigError."""


class TrainingStopped(Exception):
    """Runs that stopped at the end of a round because their trainer was asked to (SIGINT,
    SIGTERM): ``runs`` lists each one's folder and rounds done, all kept in its checkpoint, which a
    rerun resumes from."""

    def __init__(self, runs: list[tuple[str, int]]):
        super().__init__(", ".join(f"{out}: stopped after round {done}" for out, done in runs))
        self.runs = runs


def warn_deprecated(message: str, stacklevel: int = 2) -> None:
    """Announce a deprecated form that still works (docs/plugins.md, "Interface versions"): a
    ``DeprecationWarning`` (for tests and code that shows warnings) and the same message as one line
    on stderr, since Python hides DeprecationWarnings outside ``__main__``: the line lands in the
    workflow's output and in a run's ``train.log``. The caller warns once per thing deprecated."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)
    print(f"fedmgda: deprecated: {message}", file=sys.stderr, flush=True)
