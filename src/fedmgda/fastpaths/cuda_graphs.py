"""The vmap-ed batched client update (``fedmgda.client.VmapSteps``) replayed as captured CUDA
graphs (``CudaGraphs``)."""

from __future__ import annotations

import warnings
from collections import OrderedDict

import torch


class CudaGraphs:
    """Replays a function of fixed-shape CUDA tensors as captured CUDA graphs.

    A round's batched client update is thousands of small kernels, so on a GPU its time is the
    CPU's time to launch them; a graph launches them all at once. A key (shapes and everything
    else the function depends on) is captured the second time it is seen: the first call runs
    eagerly, so keys seen only once (FEMNIST's changing client groups) cost no capture. Replays
    give the eager results bit for bit; nothing random is drawn inside (the dropout masks are
    inputs, drawn per client beforehand: ``Minibatches.dropout_masks``). A key whose capture fails
    (an operation that cannot be captured) runs eagerly, with a warning.

    At most ``capacity`` graphs are held, and together no more than ``memory_fraction`` of the
    device's memory: a graph keeps its function's working set (the peak of its first, eager call,
    ``footprint``) for as long as it is held, where an eager call gives it back, so a few graphs of
    large full-batch groups (FEMNIST's, 8 runs packed) could fill the GPU. A key to capture first
    evicts the least recently used graphs until it fits (one larger than the share alone runs
    eagerly). ``capacity`` bounds the host's side (each graph's nodes; their instantiation) and
    holds every recurring key of a round: Shakespeare's 31 clients of very unequal sizes train in
    11 size groups (``client.size_groups``) of spans of up to ``client.GRAPH_STEPS`` steps, 29
    distinct keys a round (``tests/test_batched.py``). A capacity of 4 left 56 of the 61 steps of
    its 1 % round eager (counted on the CPU with a stand-in graph); that round took 8.2 s on an
    H200 (benchmarks/measurements/h200_bounds_2026-11-27/).

    An evicted key runs eagerly from then on, unless its graph was replayed at least
    ``recapture_after`` times: when a round has more recurring keys than fit, evicting and
    capturing every key again every round would cost more than eager calls (a capture costs an
    eager run and more). A key replayed many times in a row (the middle spans of a long client,
    ``VmapSteps._local_steps``) pays its capture back within the round: it is captured again.
    """

    def __init__(self, capacity: int = 64, recapture_after: int = 4, memory_fraction: float = 0.5):
        self.capacity = capacity
        self.recapture_after = recapture_after
        self.memory_fraction = memory_fraction
        self.graphs: OrderedDict = OrderedDict()
        self.replays: dict = {}  # key -> replays of its current graph
        self.footprints: dict = {}  # key -> peak bytes of its eager call
        self.seen: set = set()
        self.failed: set = set()
        self.evicted: set = set()

    def __call__(self, key, fn, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if key not in self.graphs:
            if key not in self.seen or key in self.failed or key in self.evicted:
                self.seen.add(key)
                outputs, self.footprints[key] = self.footprint(fn, inputs)
                return outputs
            if not self._make_room(key):
                return fn(*inputs)
            try:
                self.graphs[key] = self._capture(fn, inputs)
            # an operation that cannot be captured: stay eager for this key
            except RuntimeError as error:
                self.failed.add(key)
                warnings.warn("CUDA graph capture failed, running eagerly: "
                              f"{str(error).splitlines()[0]}", stacklevel=2)
                return fn(*inputs)
            self.replays[key] = 0
        self.graphs.move_to_end(key)
        self.replays[key] += 1
        graph, static_inputs, static_outputs = self.graphs[key]
        for static, x in zip(static_inputs, inputs):
            static.copy_(x)
        graph.replay()
        return tuple(out.clone() for out in static_outputs)

    @staticmethod
    def footprint(fn, inputs) -> tuple[tuple[torch.Tensor, ...], int]:
        """``fn(*inputs)`` and the peak bytes it allocated on the CUDA device beyond what was
        allocated before (0 on the CPU)."""
        device = next((x.device for x in inputs if x.is_cuda), None)
        if device is None:
            return fn(*inputs), 0
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        outputs = fn(*inputs)
        return outputs, torch.cuda.max_memory_allocated(device) - before

    def _make_room(self, key) -> bool:
        """Whether ``key`` may be captured: the least recently used graphs are evicted until one
        more graph stays within ``capacity`` and the held graphs' and its own peaks (their eager
        calls') within ``memory_fraction`` of the device memory (:meth:`device_memory`). False,
        evicting nothing, for a key whose peak alone exceeds that share."""
        limit = self.memory_fraction * self.device_memory()
        need = self.footprints.get(key, 0)
        if need > limit:
            return False
        while (self.graphs
               and (len(self.graphs) >= self.capacity
                    or sum(self.footprints.get(k, 0) for k in self.graphs) + need > limit)):
            oldest = self.graphs.popitem(last=False)[0]
            if self.replays.pop(oldest) < self.recapture_after:
                self.evicted.add(oldest)
        return True

    @staticmethod
    def device_memory() -> int:
        """The current CUDA device's memory in bytes (unbounded without CUDA)."""
        return (torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
                if torch.cuda.is_available() else 1 << 62)

    @staticmethod
    def _capture(fn, inputs):
        static_inputs = tuple(x.clone() for x in inputs)
        stream = torch.cuda.Stream()
        # warm up on the capture stream first (per-stream cuBLAS/cuDNN state must not be created
        # during capture); the generator is rewound so that replays draw what eager calls would
        rng = torch.cuda.get_rng_state()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(*static_inputs)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.set_rng_state(rng)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            static_outputs = fn(*static_inputs)
        return graph, static_inputs, static_outputs

