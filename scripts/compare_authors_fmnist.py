"""Check the package's F-MNIST pipeline against the authors' own code, item by item.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA      # outside this repository
    # numpy 2.4 on x86-64 (docs/protocol.md §8.19)
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
    python scripts/compare_authors_fmnist.py --authors /tmp/Fed-MGDA/main --seeds 1 5000 6000

The authors' functions are imported from the folder given (their code never enters this
repository; ``authors_code.authors_modules``, the harness shared with the scripts that run it). For
each seed it compares, with the package's ``shards`` partition under both readings of the label sort
(``dataset_options.sort``):

- the partition: ``main/sampling.py``'s ``noniid(dataset, 100, 300, 200)`` after
  ``np.random.seed(seed)``, as ``main/utils.py`` calls it, cut by ``main/update.py``'s 80/10/10
  positional split: users whose train / test index lists are identical, and users whose test
  split has the same class;
- the pixels: torchvision's ``ToTensor`` + ``Normalize(0.1307, 0.3081)`` of a PIL image, as the
  authors' loader does, against the package's tensors (largest absolute difference);
- the initial model: the authors' ``CNNMnist`` and the package's ``CNNFashion`` built after
  ``torch.manual_seed(seed)``.

Training itself is not run here: the client step is tested against ``torch.optim.SGD``
(tests/test_client.py) and the batched path's dropout against the eager module's
(tests/test_batched.py); docs/fmnist-fairness.md says what was and was not compared.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from fedmgda.data import load_federated
from fedmgda.data.fmnist import read_all
from fedmgda.data.partition import split_user
from fedmgda.models import CNNFashion

sys.path.insert(0, str(Path(__file__).resolve().parent))
# noqa: E402  (the harness around the authors' code, beside this script)
from authors_code import authors_modules


def authors_partition(sampling, labels: np.ndarray,
                      seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    groups = sampling.noniid(SimpleNamespace(targets=torch.from_numpy(labels)), 100, 300, 200)
    out = []
    for user in range(100):
        train, _, test = split_user([int(i) for i in list(groups[user])])
        out.append((train, test))
    return out


def compare_partition(sampling, raw_dir: Path, labels: np.ndarray, seed: int) -> None:
    theirs = authors_partition(sampling, labels, seed)
    for sort in ("quicksort", "stable"):
        ours = load_federated("fmnist", raw_dir, partition="shards", seed=seed,
                              options={"sort": sort})
        same_train = sum(np.array_equal(t[0], ours.train_idx[u].numpy())
                         for u, t in enumerate(theirs))
        same_test = sum(np.array_equal(t[1], ours.test_idx[u].numpy())
                        for u, t in enumerate(theirs))
        same_class = sum(labels[t[1][0]] == int(ours.y[ours.test_idx[u][0]])
                         for u, t in enumerate(theirs))
        print(f"seed {seed}, sort {sort:9s}: identical train lists {same_train}/100, test lists "
              f"{same_test}/100, same test class {same_class}/100")


def compare_pixels(raw_dir: Path, images: np.ndarray) -> None:
    from PIL import Image
    from torchvision import transforms

    ours = load_federated("fmnist", raw_dir, partition="iid", seed=1)
    transform = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((0.1307,), (0.3081,))])
    picks = np.random.default_rng(0).choice(len(images), 500, replace=False)
    diff = max(float((transform(Image.fromarray(images[i], mode="L")) - ours.x[i]).abs().max())
               for i in picks)
    print(f"pixels: largest |torchvision - package| over 500 images: {diff:g}")


def compare_init(models, seed: int) -> None:
    torch.manual_seed(seed)
    theirs = models.CNNMnist(SimpleNamespace(num_channels=1, num_classes=10))
    torch.manual_seed(seed)
    ours = CNNFashion(10)
    same = all(torch.equal(a, b)
               for a, b in zip(theirs.parameters(), ours.parameters(), strict=True))
    print(f"seed {seed}: initial CNN identical: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--authors", required=True,
                        help="the main/ folder of a watml/Fed-MGDA checkout")
    parser.add_argument("--raw-dir", default="resources/raw",
                        help="resources/raw, with the four files in fmnist/")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 5000, 6000])
    args = parser.parse_args()
    raw_dir = Path(args.raw_dir).resolve()  # the authors' folder becomes the working directory
    with authors_modules(Path(args.authors).resolve()):
        import models  # the authors' main/models.py
        import sampling  # the authors' main/sampling.py

        images, labels, _, _ = read_all(raw_dir)
        print(f"numpy {np.__version__}, torch {torch.__version__}")
        for seed in args.seeds:
            compare_partition(sampling, raw_dir, labels.astype(np.int64), seed)
            compare_init(models, seed)
        compare_pixels(raw_dir, images)


if __name__ == "__main__":
    main()
