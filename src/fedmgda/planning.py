"""What makes the workflow's planning (Snakemake's DAG of a large registry) fast, applied by
``workflow/Snakefile`` before any rule is read (:func:`drop_rule_function`: by
``workflow/rules/train.smk`` to each pack rule).

Snakemake asks ``inspect.signature`` which arguments an input function, a params or resources
function and each resource's evaluator take, every time it calls one: several times per job and
resource, which is a tenth of planning a large grid. :func:`cache_function_params` remembers the
answer per function (a function's parameters do not change once it is made); bound methods are
remembered by their function, every other callable is asked each time as before.
:func:`tune_gc` makes the cyclic garbage collector run less often while the DAG's objects
(millions, most of them alive until the end) are built. Snakemake keeps each rule's function as a
global of the Snakefile, ``__<rule name>``, and copies those globals every time it formats a shell
job's command (three times a job in a dry run's listing): with one rule per pack of runs that is
packs x shell jobs, quadratic in the runs; :func:`drop_rule_function` removes such a global (the
rule keeps its function). A job's listing (``Job.log_info``: every job of a dry run, each job
started) formats its shell command three times; :func:`format_shell_command_once` makes it format
it once per listing (nothing the command is made from changes within one).

Nothing here imports torch, so the Snakefile parses fast.
"""

from __future__ import annotations

import contextvars
import gc
import inspect
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

# the modules that hold their own reference to snakemake.common.get_function_params
_USERS = ("snakemake.common", "snakemake.rules", "snakemake.jobs")
# the youngest generation's threshold while planning (CPython's default: 700)
GC_THRESHOLD0 = 50_000


def cached_function_params(original: Callable[[Callable], Mapping[str, Any]]):
    """``original`` (Snakemake's ``get_function_params``: a callable's parameters, or the list a
    function's ``_overwrite_params`` gives) with its answer remembered per plain function, and
    per underlying function for a bound method (the method's own parameters, ``self`` left out);
    a function Snakemake tagged with ``_overwrite_params`` and any other callable (a partial, an
    object with ``__call__``) are passed to ``original`` every time."""
    functions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    methods: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get_function_params(func: Callable) -> Mapping[str, Any]:
        if isinstance(func, types.MethodType):
            table, key = methods, func.__func__
        elif isinstance(func, types.FunctionType):
            table, key = functions, func
        else:
            return original(func)
        if hasattr(key, "_overwrite_params") or hasattr(func, "_overwrite_params"):
            return original(func)
        try:
            return table[key]
        except KeyError:
            params = table[key] = original(func)
            return params

    get_function_params.original = original
    return get_function_params


def cache_function_params() -> bool:
    """Snakemake's ``get_function_params`` replaced by :func:`cached_function_params` in every
    module that uses it; False (nothing changed) where this Snakemake has no such function."""
    import importlib

    try:
        modules = [importlib.import_module(name) for name in _USERS]
    except ImportError:
        return False
    current = getattr(modules[0], "get_function_params", None)
    if current is None:
        return False
    if getattr(current, "original", None) is not None:  # already applied (an included workflow)
        return True
    if inspect.signature(current).parameters.keys() != {"func"}:
        return False
    cached = cached_function_params(current)
    for module in modules:
        if getattr(module, "get_function_params", None) is current:
            module.get_function_params = cached
    return True


def tune_gc(threshold0: int = GC_THRESHOLD0) -> None:
    """The collector's youngest generation collected every ``threshold0`` allocations instead of
    CPython's 700, the older generations' thresholds as they are; what exists so far (the
    interpreter, Snakemake, the registry) moved out of the collector's sight (``gc.freeze``)."""
    _, older, oldest = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold0, gc.get_threshold()[0]), older, oldest)


def drop_rule_function(namespace: dict[str, Any], rule: Any) -> bool:
    """The global ``__<rule name>`` by which ``namespace`` (the Snakefile's globals) holds
    ``rule``'s function removed, the rule's own reference (``rule.run_func``) left as it is; False
    (nothing removed) where the namespace has no such global or it is not that function."""
    name = f"__{rule.name}"
    func = namespace.get(name)
    if func is None or func is not getattr(rule, "run_func", None):
        return False
    del namespace[name]
    return True


# the job being listed and, once formatted, its shell command (format_shell_command_once)
_LISTING: contextvars.ContextVar[list | None] = contextvars.ContextVar("fedmgda_listing",
                                                                     default=None)


def format_shell_command_once(job_class: type | None = None) -> bool:
    """``job_class``'s (default: Snakemake's ``Job``) ``log_info`` made to format the job's shell
    command (its ``shellcmd`` property) once however often it reads it, the same text; read at
    any other time, it is formatted as before. False (nothing changed) where the class has no
    such property and method."""
    if job_class is None:
        try:
            from snakemake.jobs import Job as job_class
        except ImportError:
            return False
    shellcmd, log_info = job_class.__dict__.get("shellcmd"), job_class.__dict__.get("log_info")
    if not isinstance(shellcmd, property) or not callable(log_info):
        return False
    if getattr(log_info, "original", None) is not None:  # already applied (an included workflow)
        return True

    def formatted_once(self):
        listing = _LISTING.get()
        if listing is None or listing[0] is not self:
            return shellcmd.fget(self)
        if len(listing) == 1:
            listing.append(shellcmd.fget(self))
        return listing[1]

    def log_info_once(self, *args, **kwargs):
        token = _LISTING.set([self])
        try:
            return log_info(self, *args, **kwargs)
        finally:
            _LISTING.reset(token)

    log_info_once.original = log_info
    job_class.shellcmd = property(formatted_once, doc=shellcmd.__doc__)
    job_class.log_info = log_info_once
    return True
