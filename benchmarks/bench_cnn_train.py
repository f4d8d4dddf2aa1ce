"""Client training alone, F-MNIST's CNN on the CPU: the conv-net path (``fastpaths.ConvNetSteps``),
the vmap path (``client.VmapSteps``) and a plain PyTorch loop, in one process.

    python benchmarks/bench_cnn_train.py --raw-dir resources/raw [--clients 60] [--repeat 3] \\
        [--threads 1]

Each path trains the same clients (600 real training images each, one epoch of minibatches of 10,
lr 0.01, momentum 0.5, dropout on) from the same start; the plain loop is an ``nn.Module`` per
client and ``torch.optim.SGD`` (10 clients: it is the same per image). Repeats are interleaved;
printed: the median images per CPU second (time.process_time) of each and its ratio to the plain
loop.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, VmapSteps
from fedmgda.data.cifar10 import to_tensor
from fedmgda.data.fmnist import MEAN, STD, read_all
from fedmgda.fastpaths import ConvNetSteps
from fedmgda.models import CNNFashion
from fedmgda.scheduler import derived_seed, dropout_generator


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raw-dir", default="resources/raw")
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--plain-clients", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


def client_samples(samples: int, clients: int, per_client: int) -> list[torch.Tensor]:
    """``clients`` disjoint index sets of ``per_client`` samples each, drawn with seed 0."""
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(0))
    return list(order[: clients * per_client].split(per_client))


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    x_train, y_train, _, _ = read_all(Path(args.raw_dir))
    x, y = to_tensor(x_train[:, None], MEAN, STD), torch.from_numpy(y_train.astype("int64"))
    per_client = 600
    idx = client_samples(len(y), args.clients, per_client)
    torch.manual_seed(0)
    module = CNNFashion()
    flat = FlatModel(module)
    w0 = flat.initial_vector()
    hparams = LocalHParams(epochs=1, batch_size=10, lr=0.01, momentum=0.5)
    trainer = LocalTrainer(flat, hparams)
    fast, vmap = ConvNetSteps(flat, hparams), VmapSteps(trainer)

    def inputs(n: int):
        keys = [(1, 0, user) for user in range(n)]
        orders = [torch.Generator().manual_seed(derived_seed(*key)) for key in keys]
        masks = [dropout_generator(key, torch.device("cpu")) for key in keys]
        plan = trainer.minibatches.plan(idx[:n], orders, masks)
        return plan, w0, x, y, torch.ones(n)

    def conv_net(n: int) -> None:
        fast.train(*inputs(n))

    def vmapped(n: int) -> None:
        vmap.train(*inputs(n))

    def plain(n: int) -> None:
        start = {k: v.clone() for k, v in module.state_dict().items()}
        generator = torch.Generator().manual_seed(1)
        for client in idx[:n]:
            module.load_state_dict(start)
            module.train()
            optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.5)
            for batch in client[torch.randperm(len(client), generator=generator)].split(10):
                optimizer.zero_grad()
                nn.functional.nll_loss(module(x[batch]), y[batch]).backward()
                optimizer.step()
        module.load_state_dict(start)

    cases = [("plain PyTorch loop (nn.Module + SGD)", plain, args.plain_clients),
             ("vmap path (VmapSteps)", vmapped, args.clients),
             ("conv-net path (ConvNetSteps)", conv_net, args.clients),
             ("conv-net path (ConvNetSteps), 10 clients", conv_net, 10)]
    for _, work, n in cases:
        work(min(n, 10))  # warm-up
    rates: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(args.repeat):
        for name, work, n in cases:
            cpu = time.process_time()
            work(n)
            rates[name].append(n * per_client / (time.process_time() - cpu))
    median = {name: sorted(values)[len(values) // 2] for name, values in rates.items()}
    plain_rate = median[cases[0][0]]
    print(f"F-MNIST CNN client training, {args.threads} thread(s), torch {torch.__version__}, "
          f"{per_client} images per client, batch 10")
    for name, _, n in cases:
        print(f"{name:46s} {n:3d} clients: {median[name]:7.0f} images per CPU second "
              f"({median[name] / plain_rate:.2f}x plain)")


if __name__ == "__main__":
    main()
