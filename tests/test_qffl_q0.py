"""q-FFL's Table 2 runs its q = 0 row as FedAvg (config/config.yaml, docs/protocol-variants.md):
with one full-batch gradient step per device and L = 1/lr, q-FedAvg's step at q = 0 is
sum_k L u_k / (m L), the devices' mean update, i.e. FedAvg's with uniform a-priori weights."""

import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.scheduler import run


def test_qfedavg_at_q0_with_L_one_over_lr_is_uniform_fedavg():
    data = make_toy_federated(num_users=6, seed=2)
    data.train_idx[0] = data.train_idx[0][:6]  # unequal devices (6 train samples vs 24)
    common = dict(rounds=30, participation=1.0, batch_size="full", local_epochs=1, momentum=0.0,
                  local_lr=0.1,
                  sampling="size", init="glorot", per_user_every=10)
    q0 = run(toy_config(algorithm="qfedavg", hparams={"q": 0.0, "L": 10.0}, **common), data=data,
             model_name="logreg")
    fedavg = run(toy_config(algorithm="fedavg", **common), data=data, model_name="logreg")
    assert torch.allclose(q0.final_weights, fedavg.final_weights, rtol=1e-5, atol=1e-6)
    assert q0.summary["final"]["mean_acc"] == fedavg.summary["final"]["mean_acc"]
    # data-weighted FedAvg (the paper's objective (1)) is a different model on unequal devices
    weighted = run(toy_config(algorithm="fedavg", aggregation_weights="samples", **common),
                   data=data, model_name="logreg")
    assert not torch.allclose(weighted.final_weights, fedavg.final_weights, rtol=1e-4, atol=1e-5)
