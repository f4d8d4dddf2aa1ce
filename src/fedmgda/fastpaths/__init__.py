"""The fast batched training paths (``fedmgda.client.ClientSteps``) beside the vmap-ed autograd
step, chosen by the scheduler (``fedmgda.scheduler.batched_path``), never by a run or a client:
each gives the numbers of the reference path (``fedmgda.client.LocalTrainer``) up to float
rounding, or bit for bit. One module per job:

- ``linear``: ``LinearSoftmaxSteps``, the batched client update of a linear + log_softmax model
  (the Adult logistic regression), its gradient written out as batched matrix products;
- ``linear_evaluation``: ``LinearSoftmaxEvaluation``, the losses and accuracies of several such
  models at once, once per distinct (features, label) pair (``evaluate_linear`` on
  ``DistinctSamples``);
- ``convnet``: ``ConvNetSteps``, the batched client update of the small CNNs (F-MNIST's,
  FEMNIST's) on the CPU, forward and backward written out as one batched product per layer for
  all clients, and its layers;
- ``cuda_graphs``: ``CudaGraphs``, the vmap-ed batched client update replayed as captured CUDA
  graphs;
- ``threads``: ``single_thread_on_cpu``, ``threads_for_product``: tiny operations on one CPU
  thread, large products on all the job's threads.

They serve the proximal term (``LocalHParams.mu``, ``fedmgda.client.ProximalTerm``) but no
algorithm's ``local_term``: the scheduler trains such an algorithm's clients on
``fedmgda.client.VmapSteps``, eagerly.
"""

from fedmgda.fastpaths.convnet import ConvNetSteps
from fedmgda.fastpaths.cuda_graphs import CudaGraphs
from fedmgda.fastpaths.linear import LinearSoftmaxSteps
from fedmgda.fastpaths.linear_evaluation import (
    DistinctSamples,
    LinearSoftmaxEvaluation,
    evaluate_linear,
)
from fedmgda.fastpaths.threads import LARGE_PRODUCT, single_thread_on_cpu, threads_for_product

__all__ = ["LARGE_PRODUCT", "ConvNetSteps", "CudaGraphs", "DistinctSamples",
           "LinearSoftmaxEvaluation", "LinearSoftmaxSteps", "evaluate_linear",
           "single_thread_on_cpu", "threads_for_product"]
