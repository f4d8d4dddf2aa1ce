"""fedmgda.planning: Snakemake's function parameters remembered per function give the answer of
the original every time (plain functions, bound methods, partials, tagged functions); the
collector's threshold; a rule whose global the Snakefile dropped still runs its function; a job's
shell command formatted once per listing, the listing unchanged."""

from __future__ import annotations

import functools
import gc
import inspect
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

from fedmgda.planning import (
    cache_function_params,
    cached_function_params,
    drop_rule_function,
    format_shell_command_once,
    tune_gc,
)

SRC = Path(__file__).resolve().parents[1] / "src"


def counting(calls):
    def original(func):
        calls.append(func)
        if hasattr(func, "_overwrite_params"):
            return func._overwrite_params
        return inspect.signature(func).parameters

    return original


class Evaluator:
    def evaluate(self, wildcards, input=None, threads=None):
        return threads


def test_a_function_is_asked_once_and_answered_as_the_original_would():
    calls = []
    original = counting(calls)
    cached = cached_function_params(original)
    fns = [lambda w: 1, lambda w, output: 2, lambda w, **kwargs: 3, lambda: 4]
    for _ in range(3):
        for fn in fns:
            assert cached(fn) == inspect.signature(fn).parameters
    assert len(calls) == len(fns)


def test_bound_methods_are_remembered_by_their_function_without_self():
    calls = []
    cached = cached_function_params(counting(calls))
    first, second = Evaluator(), Evaluator()
    for obj in (first, second, first):
        assert list(cached(obj.evaluate)) == ["wildcards", "input", "threads"]
    assert len(calls) == 1


def test_partials_and_tagged_functions_are_asked_every_time():
    calls = []
    cached = cached_function_params(counting(calls))

    def fn(a, b, c=1):
        return a

    partial = functools.partial(fn, 1)
    assert list(cached(partial)) == ["b", "c"]
    assert list(cached(partial)) == ["b", "c"]
    assert list(cached(fn)) == ["a", "b", "c"]
    fn._overwrite_params = ["wildcards"]  # snakemake.common.overwrite_function_params
    assert cached(fn) == ["wildcards"]
    assert len(calls) == 4


def test_snakemake_uses_the_cached_lookup_and_its_answers_are_the_originals():
    import snakemake.common
    import snakemake.jobs
    import snakemake.rules

    assert cache_function_params()
    cached = snakemake.common.get_function_params
    assert cached.original is not None
    assert snakemake.rules.get_function_params is cached
    assert snakemake.jobs.get_function_params is cached
    assert cache_function_params()  # applied once: the original is not wrapped twice
    assert snakemake.common.get_function_params is cached

    def fn(wildcards, input, threads=1):
        return threads

    assert cached(fn) == cached.original(fn) == inspect.signature(fn).parameters
    aux = snakemake.common.get_input_function_aux_params(fn, {"input": 1, "output": 2})
    assert aux == {"input": 1}


def test_tune_gc_raises_the_youngest_threshold_only():
    before = gc.get_threshold()
    try:
        tune_gc(123_456)
        assert gc.get_threshold() == (max(123_456, before[0]), *before[1:])
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_drop_rule_function_removes_only_the_rules_own_function():
    def run_func():
        return 1

    rule = types.SimpleNamespace(name="made", run_func=run_func)
    other = types.SimpleNamespace(name="other", run_func=run_func)
    namespace = {"__made": run_func, "__other": lambda: 2, "made": 3}
    assert not drop_rule_function(namespace, other)  # not that rule's function
    assert drop_rule_function(namespace, rule)
    assert set(namespace) == {"__other", "made"} and rule.run_func is run_func
    assert not drop_rule_function(namespace, rule)  # already gone


SNAKEFILE = """
from pathlib import Path
from fedmgda.planning import drop_rule_function

for _i in range(3):
    rule:
        name:
            f"made_{_i}"
        output:
            f"out{_i}.txt"
        params:
            n=_i,
        run:
            Path(output[0]).write_text(f"made {params.n}")

    if _i < 2:
        assert drop_rule_function(globals(), workflow.get_rule(f"made_{_i}"))

print("kept", sorted(k for k in globals() if k.startswith("__made_")))


rule all:
    default_target: True
    input:
        [f"out{i}.txt" for i in range(3)],
"""


def test_a_rule_whose_global_is_dropped_still_runs_its_function(tmp_path):
    """Snakemake holds each rule's function as the global ``__<rule>``; with it dropped from the
    Snakefile's globals the rule's jobs run the same function."""
    (tmp_path / "Snakefile").write_text(textwrap.dedent(SNAKEFILE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SRC),
                                                                    os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "kept ['__made_2']" in proc.stdout.splitlines()
    assert [(tmp_path / f"out{i}.txt").read_text() for i in range(3)] == [
        "made 0", "made 1", "made 2"]


class Listed:
    """A job as ``format_shell_command_once`` sees it: its listing reads ``shellcmd`` thrice."""

    def __init__(self, threads):
        self.threads, self.formatted = threads, 0

    @property
    def shellcmd(self):
        self.formatted += 1
        return f"train --threads {self.threads}"

    def log_info(self, other=None):
        read = [self.shellcmd, self.shellcmd]
        if other is not None:
            read.append(other.log_info())  # a listing inside a listing (a group's jobs)
        return [*read, self.shellcmd]


def test_a_listing_formats_the_command_once_and_any_other_read_as_before():
    assert format_shell_command_once(Listed)
    assert format_shell_command_once(Listed)  # applied once, however often asked
    job, other = Listed(2), Listed(3)
    assert job.log_info() == ["train --threads 2"] * 3 and job.formatted == 1
    job.threads = 4  # read outside a listing: the command of now
    assert job.shellcmd == "train --threads 4" and job.formatted == 2
    assert job.log_info(other) == ["train --threads 4"] * 2 + [
        ["train --threads 3"] * 3, "train --threads 4"]
    assert (job.formatted, other.formatted) == (3, 1)


def test_a_class_without_the_property_is_left_as_it_is():
    class Plain:
        shellcmd = "echo"

        def log_info(self):
            return self.shellcmd

    assert not format_shell_command_once(Plain)
    assert Plain.__dict__["shellcmd"] == "echo"


LISTED_SNAKEFILE = """
import sys
sys.path.insert(0, {src!r})
if {patched}:
    from fedmgda.planning import format_shell_command_once

    assert format_shell_command_once()

rule all:
    input:
        expand("out/{{name}}.txt", name=["a", "b b", "c"]),

rule make:
    output:
        "out/{{name}}.txt",
    params:
        text=lambda w: f"{{w.name}} 'quoted'",
    threads: 2
    shell:
        "echo {{params.text:q}} {{threads}} > {{output:q}}"
"""


def test_snakemake_lists_the_same_jobs_and_commands_with_the_command_formatted_once(tmp_path):
    listings = []
    for patched in (False, True):
        wd = tmp_path / str(patched)
        wd.mkdir()
        (wd / "Snakefile").write_text(LISTED_SNAKEFILE.format(src=str(SRC), patched=patched))
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "2"],
                              cwd=wd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        # the listing's lines, but for its date, id, folder and the reasons' file order (a set's)
        listed = (proc.stdout + proc.stderr).replace(str(wd), "WD").splitlines()
        listings.append(sorted(line for line in listed if not line.lstrip().startswith(
            ("[", "Date:", "Workflow ID:", "reason:"))))
    assert "Shell command: echo 'b b '\"'\"'quoted'\"'\"'' 2 > 'out/b b.txt'" in listings[1]
    assert listings[1] == listings[0]
