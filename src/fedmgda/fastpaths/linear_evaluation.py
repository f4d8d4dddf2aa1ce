"""The losses and accuracies of several linear + log_softmax models at once
(``LinearSoftmaxEvaluation``), once per distinct (features, label) pair (``evaluate_linear`` on
``DistinctSamples``): the evaluation beside the ``linear-softmax`` path."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedmgda.client import FlatModel
from fedmgda.fastpaths.threads import threads_for_product
from fedmgda.metrics import participant_stats, per_owner_mean


@torch.no_grad()
def evaluate_linear(model: FlatModel, ws: torch.Tensor, x: torch.Tensor,
                    y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``evaluate_samples`` of several linear + log_softmax models (``LinearSoftmaxSteps.eligible``)
    at once, in one matrix product: ``ws`` (models, P) flat weights; per-sample NLL and correctness
    as (samples, models). The logits are laid out classes first, (classes, models, samples), so
    that the softmax and the argmax run over the leading dimension (several times faster on the
    CPU than over a short trailing one); the prediction is the first of equal maxima, as
    ``torch.argmax``'s (written out: torch.argmax over a leading dimension is slow on the CPU)."""
    classes, features = model.shapes[0]
    models = len(ws)
    weight = ws[:, : classes * features].reshape(models, classes, features).transpose(
        0, 1).reshape(classes * models, features)
    bias = ws[:, classes * features :].T.reshape(-1, 1)
    with threads_for_product(classes * models * features * len(y)):
        logits = torch.addmm(bias, weight,
                             x.flatten(1).to(ws.dtype).T).view(classes, models, len(y))
    log_p = F.log_softmax(logits, dim=0)
    per_sample = -log_p.gather(0, y.view(1, 1, -1).expand(1, models, -1))[0]
    if classes == 2:
        correct = (log_p[1] > log_p[0]) == y.bool()
    else:
        best, predicted = log_p[0], torch.zeros_like(per_sample, dtype=y.dtype)
        for c in range(1, classes):
            predicted = torch.where(log_p[c] > best, c, predicted)
            best = torch.maximum(best, log_p[c])
        correct = predicted == y
    return per_sample.T.contiguous(), correct.to(per_sample.dtype).T.contiguous()


class DistinctSamples:
    """The distinct (features, label) pairs of a set of samples and each sample's pair: samples
    that are equal have equal losses, so a model can be evaluated once per pair and the values
    read back per sample (``expand``). Adult's 99 binary features: 32 561 train samples are
    9 646 pairs, 16 281 test samples 5 891."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        x = x.flatten(1)
        pairs, self.inverse = torch.unique(torch.cat([x, y[:, None].to(x.dtype)], dim=1), dim=0,
                                           return_inverse=True)
        self.x, self.y = pairs[:, :-1], pairs[:, -1].to(y.dtype)

    def subset(self, rows: torch.Tensor) -> DistinctSamples:
        """The ``DistinctSamples`` of the samples ``rows`` of those this was built from, the same
        pairs in the same (sorted) order as built from those samples directly, found with a 1-D
        ``unique`` of their pair numbers: a round's participants cost no row-wise ``unique`` (on
        Synthetic's 60 continuous features, where no two samples are equal, that cost 20 ms)."""
        used, inverse = torch.unique(self.inverse[rows], return_inverse=True)
        part = object.__new__(DistinctSamples)
        part.x, part.y, part.inverse = self.x[used], self.y[used], inverse
        return part

    def expand(self, values: torch.Tensor) -> torch.Tensor:
        """Values of the pairs, (pairs, ...), as values of the samples, (samples, ...)."""
        return values[self.inverse]


class LinearSoftmaxEvaluation:
    """The participant losses and test accuracies of several runs' linear + log_softmax models
    (the batched runs of a pack, which ``LinearSoftmaxSteps`` trains), each distinct (features,
    label) pair evaluated once for all of them (``evaluate_linear`` on ``DistinctSamples``), the
    pairs kept per partition. A run is known by its ``fedmgda.simulator.RunInputs``; the runs
    evaluated together share its partition."""

    def __init__(self):
        # partition -> the latest participants'
        self._train: dict[str, tuple[list[int], DistinctSamples]] = {}
        self._test: dict[str, DistinctSamples] = {}
        self._pool: DistinctSamples | None = None  # the pairs of all the pack's samples

    def participant_losses(self, run, ws: list[torch.Tensor],
                           users: list[int]) -> list[dict[str, torch.Tensor]]:
        """``RunInputs.participant_losses`` of the models ``ws`` (one per run, the runs sharing
        ``run``'s partition and the participants ``users``)."""
        pairs = self.train_pairs(run, users)
        # (samples, runs)
        per_sample, correct = (pairs.expand(values)
                               for values in evaluate_linear(run.trainer.model, torch.stack(ws),
                                                             pairs.x, pairs.y))
        sizes = [len(run.data.train_idx[user]) for user in users]
        # (users, runs) each
        stats = participant_stats(per_sample, correct, sizes, run.trainer.hparams.batch_size)
        return [{key: value[:, r] for key, value in stats.items()} for r in range(len(ws))]

    def evaluate(self, run, ws: list[torch.Tensor],
                 with_global: list[bool]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
        """``RunInputs.evaluate`` of the models ``ws`` (one per run, the runs sharing ``run``'s
        partition) on the users' and the global test sets."""
        pairs = self.test_pairs(run)
        # (samples, runs)
        per_sample, correct = (pairs.expand(values)
                               for values in evaluate_linear(run.trainer.model, torch.stack(ws),
                                                             pairs.x, pairs.y))
        n = len(run.test_y)
        # (runs, users)
        acc = per_owner_mean(correct[:n], run.test_owner, run.data.num_users).T.cpu().numpy()
        loss = per_owner_mean(per_sample[:n], run.test_owner, run.data.num_users).T.cpu().numpy()
        global_acc, start = {}, n
        for name, (_, gy) in run.data.global_test.items():
            global_acc[f"test_acc_{name}"] = correct[start : start + len(gy)].mean(dim=0).tolist()
            start += len(gy)
        return [(acc[r], loss[r],
                 {key: values[r] for key, values in global_acc.items()} if wanted else {})
                for r, wanted in enumerate(with_global)]

    def train_pairs(self, run, users: list[int]) -> DistinctSamples:
        """The participants' pooled train samples as ``DistinctSamples``: a subset of the pack's
        samples' pairs (found once), the latest participants' kept per partition."""
        kept = self._train.get(run.partition)
        if kept is None or kept[0] != users:
            if self._pool is None:
                # the pack shares one copy of the samples
                self._pool = DistinctSamples(run.data.x, run.data.y)
            pooled = torch.cat([run.data.train_idx[user] for user in users])
            kept = self._train[run.partition] = (list(users), self._pool.subset(pooled))
        return kept[1]

    def test_pairs(self, run) -> DistinctSamples:
        """The users' test samples (``test_x``), then each global test set, as
        ``DistinctSamples``."""
        if run.partition not in self._test:
            global_sets = list(run.data.global_test.values())
            x = torch.cat([run.test_x.flatten(1), *(gx.flatten(1) for gx, _ in global_sets)])
            y = torch.cat([run.test_y, *(gy for _, gy in global_sets)])
            self._test[run.partition] = DistinctSamples(x, y)
        return self._test[run.partition]
