"""Pack assignment of the workflow (fedmgda.packs): which runs share one training job, and what
the job asks the scheduler for. Pure functions, no Snakemake."""

from __future__ import annotations

import copy
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedmgda.experiments import RunSpec, expand
from fedmgda.packs import (
    assign_packs,
    pack_group,
    pack_resources,
    pack_rule_name,
    prox_mu,
    run_yaml_text,
    train_pack,
)

REPO = Path(__file__).resolve().parents[1]


def registry(path: str = "config/quick.yaml", **resources):
    cfg = yaml.safe_load((REPO / path).read_text())
    for dataset, res in resources.items():
        cfg["resources"].setdefault(dataset, {}).update(res)
    return expand(cfg)


def spec(key: str, pack: int = 4, runtime: int = 10, **cfg) -> RunSpec:
    config = {"dataset": "digits", "algorithm": "fedavg", "hparams": {}, "seed": 1, **cfg}
    return RunSpec(key, config, None,
                   {"gpu": 0, "mem_mb": 1000, "runtime": runtime, "threads": 1, "pack": pack},
                   ["e"])


def test_pack_one_means_no_packs():
    reg = registry(default={"pack": 1})
    assert assign_packs(reg.runs) == {}


def test_packs_respect_the_grouping_key_and_the_size():
    reg = registry(default={"pack": 5})
    packs = assign_packs(reg.runs)
    assert packs
    seen = set()
    for name, keys in packs.items():
        assert 2 <= len(keys) <= 5
        groups = {f"{reg.runs[k].experiments[0]}/{pack_group(reg.runs[k].config)}" for k in keys}
        assert groups == {name.rsplit("/", 1)[0]}
        # what check_packable compares: samples, model, local training, device
        for field in ("dataset", "dataset_options", "batch_size", "local_lr", "local_epochs",
                      "momentum", "device"):
            assert len({repr(reg.runs[k].config.get(field)) for k in keys}) == 1, (name, field)
        assert len({prox_mu(reg.runs[k].config) for k in keys}) == 1
        assert not seen & set(keys)  # a run is in one pack at most
        seen |= set(keys)
    # balanced packs of at most 5: a run trained alone is alone in its group
    def group(s):
        return (s.experiments[0], pack_group(s.config))

    for k in set(reg.runs) - seen:
        assert [group(s) for s in reg.runs.values()].count(group(reg.runs[k])) == 1


def test_group_sizes_are_balanced():
    runs = {f"s/fedavg/default/clean/seed{i}": spec(f"s/fedavg/default/clean/seed{i}", pack=4,
                                                    seed=i)
            for i in range(1, 10)}
    packs = assign_packs(runs)
    assert sorted(len(v) for v in packs.values()) == [3, 3, 3]  # 9 runs, at most 4: 3 + 3 + 3
    runs.pop("s/fedavg/default/clean/seed9")
    assert sorted(len(v) for v in assign_packs(runs).values()) == [4, 4]


def test_trained_runs_leave_their_pack_and_the_other_packs_keep_their_members():
    runs = {f"s/fedavg/default/clean/seed{i}": spec(f"s/fedavg/default/clean/seed{i}", pack=4,
                                                    seed=i)
            for i in range(1, 10)}
    full = assign_packs(runs)
    trained = ["s/fedavg/default/clean/seed1", "s/fedavg/default/clean/seed2",
               "s/fedavg/default/clean/seed3"]
    left = assign_packs(runs, trained=trained)
    assert not set(trained) & {k for keys in left.values() for k in keys}
    for name, keys in left.items():  # same names, same members less the trained ones
        assert keys == [k for k in full[name] if k not in trained]
    # a pack left with one run dissolves (that run gets its own job)
    assert len(left) == len(full) - 1 and sum(map(len, left.values())) == 6


def test_trained_runs_need_every_file_and_todays_config(tmp_path):
    from fedmgda.packs import RUN_FILES, trained_runs

    configs = {f"s/seed{i}": f"seed: {i}\n" for i in (1, 2, 3, 4)}
    for key, text in configs.items():
        (tmp_path / key).mkdir(parents=True)
        for name in RUN_FILES:
            (tmp_path / key / name).write_text(text if name == "run.yaml" else "x")
    (tmp_path / "s/seed2/summary.json").unlink()  # not finished
    # trained with another config
    (tmp_path / "s/seed3/run.yaml").write_text("seed: 3\nrounds: 5\n")
    assert trained_runs(tmp_path, configs) == {"s/seed1", "s/seed4"}
    assert trained_runs(tmp_path, {**configs, "s/seed9": "seed: 9\n"}) == {"s/seed1", "s/seed4"}


def test_assignment_is_deterministic_and_order_free():
    reg = registry(default={"pack": 4})
    items = list(reg.runs.items())
    random.Random(0).shuffle(items)
    assert assign_packs(dict(items)) == assign_packs(reg.runs)
    assert all(keys == sorted(keys) for keys in assign_packs(reg.runs).values())


def test_an_unrelated_experiment_leaves_other_packs_alone():
    cfg = yaml.safe_load((REPO / "config/quick.yaml").read_text())
    cfg["resources"]["default"]["pack"] = 4
    before = assign_packs(expand(copy.deepcopy(cfg)).runs)
    cfg["settings"]["digits_lr0.2"] = {"dataset": "digits", "partition": "shards", "batch_size": 10,
                                       "local_lr": 0.2, "participation": 0.2, "rounds": 12}
    cfg["experiments"]["extra"] = {"setting": "digits_lr0.2", "grid": "all_algorithms",
                                   "seeds": [1, 2]}
    after = assign_packs(expand(cfg).runs)
    assert set(before) < set(after)
    assert all(after[name] == keys for name, keys in before.items())


def test_local_training_splits_groups():
    base = spec("a", local_lr=0.05, batch_size=10)
    assert pack_group(base.config) == pack_group(spec("b", seed=2, algorithm="fedmgda_plus",
                                                      local_lr=0.05,
                                                      batch_size=10, hparams={"eta": 1.0}).config)
    for other in ({"local_lr": 0.1}, {"batch_size": "full"}, {"momentum": 0.0}, {"local_epochs": 2},
                  {"algorithm": "fedprox", "hparams": {"mu": 0.01}}, {"dataset": "synthetic"},
                  {"dataset_options": {"max_samples": 100}}, {"batched": False}, {"device": "cuda"},
                  {"conv": "im2col"}):
        cfg = {**base.config, **other}
        assert pack_group(cfg) != pack_group(base.config), other
    # mgda_prox's implied mu (0.1, dropped from its hparams) is its mu all the same
    assert prox_mu({"algorithm": "mgda_prox", "hparams": {}}) == 0.1
    assert pack_group({**base.config, "algorithm": "mgda_prox"}) == pack_group(
        {**base.config, "algorithm": "fedprox", "hparams": {"mu": 0.1}})


def test_paper_profile_packs_table7_in_its_own_jobs():
    reg = registry("config/config.yaml")
    packs = assign_packs(reg.runs)
    table7 = set(reg.runs_of(["table7"]))
    # 23 rows x 5 seeds, and Baseline_PhD (the PhD client alone: other samples)
    assert len(table7) == 120
    mine = {name: set(keys) for name, keys in packs.items() if table7 & set(keys)}
    assert sorted(mine) == ["table7/adult_clientsphd_shift_by_one1_k1_b10_lr0.01_m0.5/pack1",
                            "table7/adult_shift_by_one1_k1_b10_lr0.01_m0.5/pack1"]
    assert set().union(*mine.values()) == table7  # its packs hold no run of table7_variants
    assert len({pack_rule_name(p) for p in packs}) == len(packs)


def test_pack_auto_is_the_measured_best_size_on_the_runs_device(monkeypatch):
    """``pack: auto``: the size ``fedmgda.devices.measured_pack`` gives for the run's dataset on the
    device it trains on where a GPU is present; the paper profile's packs are those of explicit
    packs of the committed table's sizes (CIFAR-10 4, F-MNIST and Shakespeare 8:
    tests/test_devices.py), and another measured size re-cuts the groups."""
    from fedmgda import devices

    explicit = assign_packs(registry("config/config.yaml", cifar10={"pack": 4}, fmnist={"pack": 8},
                                     shakespeare={"pack": 8}).runs)
    reg = registry("config/config.yaml")
    assert {reg.runs[k].resources["pack"] for k in reg.runs
            if reg.runs[k].config["dataset"] == "cifar10"} == {"auto"}
    assert assign_packs(reg.runs) == explicit
    rows = devices.parse_round_times("setting,dataset,model,device,machine,threads,runs,"
                                     "s_per_round,eval_s,source\n"
                                     "s,cifar10,cnn_cifar,cuda,G,1,1,0.1,0,x\n"
                                     "s,cifar10,cnn_cifar,cuda,G,1,2,0.1,0,x\n"
                                     "s,cifar10,cnn_cifar,cuda,G,1,4,0.4,0,x\n")
    monkeypatch.setattr(devices, "round_times", lambda: tuple(rows))
    packs = assign_packs(reg.runs)
    cifar = [keys for name, keys in packs.items()
             if reg.runs[keys[0]].config["dataset"] == "cifar10"]
    # measured best: 2 (0.05 per run-round beside 0.1 alone and by 4)
    assert max(map(len, cifar)) == 2
    fmnist = [keys for keys in packs.values() if reg.runs[keys[0]].config["dataset"] == "fmnist"]
    assert not fmnist  # no F-MNIST pack measured: one job per run


def test_pack_resources():
    specs = [spec("a", runtime=10, dataset="cifar10"), spec("b", runtime=30, dataset="cifar10")]
    specs[1].resources.update(gpu=1, threads=4, mem_mb=3000)
    assert pack_resources(specs) == {"threads": 4, "gpu": 1, "mem_mb": 3000, "runtime": 40}
    for s in specs:
        s.resources.update(pack_runtime=0.25, pack_mem_mb=500)
    # >= the longest run
    assert pack_resources(specs) == {"threads": 4, "gpu": 1, "mem_mb": 3500, "runtime": 30}


def test_pack_resources_gpu_only_for_runs_that_train_on_the_gpu():
    """``gpu: 1`` in the resources of a dataset whose ``device: auto`` runs train on a CPU core
    (measured faster there, or a model that is not a CNN/LSTM) asks for no GPU; an explicit device
    keeps the config's resources."""
    for dataset, device, gpu in [("adult", "auto", 0), ("digits", "auto", 0), ("cifar10", "cpu", 1),
                                 ("cifar10", "auto", 1), ("adult", "cuda", 1),
                                 ("digits", "cuda:1", 1)]:
        specs = [spec("a", dataset=dataset, device=device),
                 spec("b", dataset=dataset, device=device)]
        for s in specs:
            s.resources["gpu"] = 1
        assert pack_resources(specs)["gpu"] == gpu, (dataset, device)


def test_train_pack_gives_the_trainer_every_config_and_appends_its_log(tmp_path):
    """Each config reaches the trainer as a file of its own out of the run folders (the trainer
    writes run.yaml); the pack's log is appended to every run's train.log, on failure too, but not
    to a run whose summary.json the job left as it found it."""
    members = [{"config": f"seed: {i}\n", "out": str(tmp_path / f"r{i}"),
                "log": str(tmp_path / f"r{i}/train.log")} for i in (1, 2)]
    script = ("import os, sys; a = sys.argv[1:]; i = a.index('--out'); "
              "print('trained', *[open(c).read().strip() for c in a[1:i]], "
              "'waits' if os.environ.get('FEDMGDA_WAIT_FOR_LOCK') == '1' else 'refuses')")
    train_pack(f"{sys.executable} -c {script!r}", members, tmp_path / "pack.log")
    for i in (1, 2):
        log = (tmp_path / f"r{i}/train.log").read_text()
        assert "trained seed: 1 seed: 2 waits" in log, log
        assert not (tmp_path / f"r{i}/run.yaml").exists()
    (tmp_path / "r1/summary.json").write_text("{}")  # finished before: its log is left alone
    with pytest.raises(Exception, match="pack.log"):
        train_pack(f"{sys.executable} -c 'import sys; print(\"boom\"); sys.exit(3)'", members,
                   tmp_path / "pack.log")
    assert "boom" not in (tmp_path / "r1/train.log").read_text()
    log = (tmp_path / "r2/train.log").read_text()  # the log reaches the runs on failure too
    assert log.index("trained seed: 1") < log.index("boom"), log


def test_train_pack_stops_at_its_timeout_and_keeps_the_earlier_logs(tmp_path):
    """A pack stopped at a deadline (TimeoutExpired, the trainer's whole
    process group ended), a resumed run's train.log appended to."""
    import subprocess
    import time

    members = [{"config": "seed: 1\n", "out": str(tmp_path / "r1"),
                "log": str(tmp_path / "r1/train.log")}]
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1/train.log").write_text("the earlier part\n")
    script = ("import subprocess, sys, time; print('started', flush=True); "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "time.sleep(60)")
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        train_pack(f"{sys.executable} -c {script!r}", members, tmp_path / "pack.log", timeout=2)
    assert time.monotonic() - start < 30
    log = (tmp_path / "r1/train.log").read_text()
    assert log.startswith("the earlier part\npack of 1 runs: ") and "started" in log


def test_train_pack_passes_sigterm_on_to_the_trainer_and_waits_for_it(tmp_path):
    """The pack script's own SIGTERM (a cluster stopping the job) reaches the trainer, which is
    waited for: what it writes as it stops is in the run's log."""
    import subprocess
    import textwrap

    members = [{"config": "seed: 1\n", "out": str(tmp_path / "r1"),
                "log": str(tmp_path / "r1/train.log")}]
    trainer = tmp_path / "trainer.py"
    trainer.write_text(textwrap.dedent("""\
        import signal, sys, time
        def stop(signum, frame):
            time.sleep(1)  # the end of a round
            print('checkpointed after', signal.Signals(signum).name, flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print('training', flush=True)
        time.sleep(60)
        """))
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(f"from fedmgda.packs import train_pack\n"
                       f"train_pack({f'{sys.executable} {trainer}'!r}, {members!r}, "
                       f"{str(tmp_path / 'pack.log')!r})\n")
    job = subprocess.Popen([sys.executable, str(wrapper)], start_new_session=True,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while "training" not in ((tmp_path / "pack.log").read_text()
                             if (tmp_path / "pack.log").exists() else ""):
        assert time.monotonic() < deadline and job.poll() is None
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)  # the script alone, not its process group
    assert job.wait(timeout=60) != 0
    assert "checkpointed after SIGTERM" in (tmp_path / "r1/train.log").read_text()


def test_run_yaml_text_is_the_registry_config_with_its_partition_file():
    reg = registry()
    on_partition = next(s for s in reg.runs.values() if s.partition is not None)
    cfg = yaml.safe_load(run_yaml_text(on_partition, "results/quick/partitions"))
    assert cfg == {**on_partition.config,
                   "partition_file": f"results/quick/partitions/{on_partition.partition}.npz"}
    alone = next((s for s in reg.runs.values() if s.partition is None), None)
    if alone is not None:
        assert yaml.safe_load(run_yaml_text(alone, "p")) == alone.config


def test_the_slurm_profiles_pack_examples_are_the_paper_configs():
    """profiles/README.md's table of what a pack asks for: its two example columns (Table 7's
    Adult pack, a Table 8 CIFAR-10 pack) are pack_resources of config/config.yaml's packs."""
    import re

    from docnumbers import _md_tables

    reg = registry("config/config.yaml")
    packs = assign_packs(reg.runs)
    (adult,) = [k for name, k in packs.items() if name.startswith("table7/adult_shift")]
    cifar = next(k for name, k in packs.items() if name.startswith("table8/cifar10"))
    (header, rows), = [table for table in _md_tables((REPO / "profiles" / "README.md").read_text())
                       if table[0][0] == "resource"]
    assert (f"Table 7 Adult pack ({len(adult)} runs)" in header[2]
            and f"CIFAR-10 packs of {len(cifar)}" in header[3])
    for keys, column in ((adult, 2), (cifar, 3)):
        want = pack_resources([reg.runs[k] for k in keys])
        for resource in ("threads", "gpu", "mem_mb", "runtime"):
            row = next(cells for cells in rows if cells[0].startswith(f"`{resource}`"))
            assert re.findall(r"\d+", row[column])[-1] == str(want[resource]), \
                (resource, row[column], want)


@pytest.mark.parametrize("cfg", [
    {"seed": 1, "algorithm": "fedavg", "hparams": {}, "attack": {"kind": "none"}},
    {"b": -0.0, "a": 0.0, "c": 1e-300, "d": float("inf"), "e": [1, 1.0, True, None, "1"]},
    {"title": "Ünïcode – “quotes”: yes", "long": "word " * 40, "multi": "a\nb", "empty": ""},
    {"nested": {"z": [{"y": 1}, []], "a": {}}, "list": [[1, 2], {"k": "v"}], "n": None},
    {"yes": "yes", "no": "no", "null": "null", "num": "1.5", "date": "2026-12-02"},
], ids=["run", "numbers", "strings", "nested", "look-alikes"])
def test_yaml_text_is_that_of_safe_dump(cfg):
    """The run.yaml text made of remembered per-key fragments is safe_dump's, byte for byte, also
    for a value that only looks like another (0.0 and -0.0, '1.5', 'yes'), twice in a row."""
    from fedmgda.packs import yaml_text

    expected = yaml.safe_dump(cfg, sort_keys=True, allow_unicode=True)
    assert yaml_text(cfg) == expected
    assert yaml_text(copy.deepcopy(cfg)) == expected


def test_yaml_text_dumps_whole_what_fragments_would_write_otherwise():
    """A container met twice is written with an anchor and an alias, a mapping with a key that is
    no string and a tuple as safe_dump writes them."""
    from fedmgda.packs import yaml_text

    shared = {"eta": 1.0}
    cfg = {"a": shared, "b": shared, "c": [shared]}
    text = yaml_text(cfg)
    assert "&id001" in text and text == yaml.safe_dump(cfg, sort_keys=True, allow_unicode=True)
    numbered = {1: "one", 2: "two"}
    assert yaml_text(numbered) == yaml.safe_dump(numbered, sort_keys=True, allow_unicode=True)
    assert yaml_text({}) == "{}\n"
    pair = {"t": (1, 2), "u": 1}
    assert yaml_text(pair) == yaml.safe_dump(pair, sort_keys=True, allow_unicode=True)
