"""The fixed-shape decoding step (workbench/translation/decode_graph.py), run eagerly on the CPU: the step a CUDA
graph replays must find the ordinary step's tokens (its attention runs over the whole buffer with the unwritten
positions masked, so only the last bits of its sums may differ). The capture itself needs CUDA: tests/test_gpu.py."""

from __future__ import annotations

import pytest
import torch

import workbench.translation.decode as decode
import workbench.translation.decode_steps as decode_steps
from tests._decoding import padded_src, tiny_translator
from workbench.translation.decode_graph import FixedStep, SlotKVCache


@pytest.fixture
def model():
    return tiny_translator("transformer")


@pytest.fixture
def src():
    return padded_src([11, 3, 7, 2, 9, 5, 11, 4, 6], seed=3)


def _fixed_on_cpu(monkeypatch, used: list[int]) -> None:
    """Take the fixed-shape step on the CPU (eagerly: graphs are captured on CUDA only); count its batches."""
    monkeypatch.setattr(decode_steps, "_fixed_step_wanted", lambda model, memory, use_cache, graphs: graphs)
    real = FixedStep.__init__

    def counting(self, *args, **kwargs):
        used.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(FixedStep, "__init__", counting)


@pytest.mark.parametrize("kind", ["greedy", "beam", "beam, keep_finished"])
def test_fixed_shape_step_finds_the_ordinary_steps_tokens(model, src, kind, monkeypatch):
    monkeypatch.setattr(decode, "drops_rows", lambda device: False)  # the batch keeps its shape, as on CUDA
    kept = kind.endswith("keep_finished")
    if kind == "greedy":
        want = decode.greedy_decode(model, src, max_extra=10)
    else:
        want, want_scores = decode.beam_search(model, src, beam=4, max_extra=10, return_scores=True, keep_finished=kept)
    used: list[int] = []
    _fixed_on_cpu(monkeypatch, used)
    if kind == "greedy":
        got = decode.greedy_decode(model, src, max_extra=10, graphs=True)
    else:
        got, got_scores = decode.beam_search(model, src, beam=4, max_extra=10, return_scores=True, graphs=True,
                                             keep_finished=kept)
        torch.testing.assert_close(got_scores, want_scores, rtol=1e-5, atol=1e-5)
    assert used == [1]  # the fixed step ran, once for the batch
    assert torch.equal(got, want)


def test_fixed_shape_step_is_only_taken_on_cuda_when_asked(model, src):
    """By default, and on the CPU even when asked, the ordinary step runs."""
    memory = model.encode(src, model.src_mask(src))
    for graphs in (False, True):
        step = decode_steps._Stepper(model, memory, model.src_mask(src), True, capacity=8, graphs=graphs)
        assert step.fixed is None
    with pytest.raises(ValueError, match="CUDA"):
        FixedStep(model, memory, model.src_mask(src), 8, graphs=True)


def test_slot_cache_writes_at_its_position_and_keeps_its_buffers():
    pos = torch.zeros(1, dtype=torch.long)
    cache = SlotKVCache(capacity=4, pos=pos)
    k = torch.ones(2, 1, 1, 3)
    cache.append(k, -k)
    pos.fill_(2)
    k_buf, _ = cache.append(2 * k, -2 * k)
    assert k_buf.shape == (2, 1, 4, 3) and cache.length == 1
    assert torch.equal(k_buf[:, :, 0], k[:, :, 0]) and torch.equal(k_buf[:, :, 2], 2 * k[:, :, 0])
    assert not k_buf[:, :, [1, 3]].any()
    address = k_buf.data_ptr()
    k_buf[1, :, 0] = 7.0
    cache.reorder(torch.tensor([1, 1]))  # beam reordering: in place (a captured graph reads these addresses)
    assert cache.k.data_ptr() == address and torch.equal(cache.k[0], cache.k[1]) and cache.k[0, 0, 0, 0] == 7.0


def test_graph_is_captured_and_replayed_on_the_memorys_device(model, src, monkeypatch):
    """With another CUDA device current, the step still captures and replays on its memory's device, on a stream
    of that device. No GPU here: torch.cuda's device switch, streams and graph are stood in for (recording which
    device is current at each call); the step itself runs eagerly on the CPU."""
    current, events = ["cuda:0"], []

    class Device:  # torch.cuda.device
        def __init__(self, device):
            self.device = str(device)

        def __enter__(self):
            self.before, current[0] = current[0], self.device

        def __exit__(self, *exc):
            current[0] = self.before

    class Stream:
        def __init__(self, device=None):
            self.device = current[0] if device is None else str(device)

        def wait_stream(self, other):
            events.append(("wait", current[0], self.device, other.device))

    class Graph:  # torch.cuda.CUDAGraph
        def replay(self):
            events.append(("replay", current[0]))

    class Capture:  # torch.cuda.graph
        def __init__(self, graph, pool=None, stream=None):
            self.stream = stream if stream is not None else Stream()

        def __enter__(self):
            events.append(("capture", current[0], self.stream.device))

        def __exit__(self, *exc):
            pass

    class OnStream:  # torch.cuda.stream
        def __init__(self, stream):
            events.append(("warm-up", current[0], stream.device))

        def __enter__(self):
            pass

        def __exit__(self, *exc):
            pass

    for name, fake in (("device", Device), ("Stream", Stream), ("CUDAGraph", Graph), ("graph", Capture),
                       ("stream", OnStream), ("current_stream", lambda device=None: Stream(device))):
        monkeypatch.setattr(torch.cuda, name, fake)
    mask = model.src_mask(src)
    step = FixedStep(model, model.encode(src, mask), mask, 8)
    step.graphs, step.device = True, torch.device("cuda:1")  # as if its memory lived on the second GPU
    token = torch.full((src.shape[0], 1), 2)
    step(token, 0)  # eager
    step(token, 1)  # captures, then replays
    step(token, 2)  # replays
    assert events and all(device == "cuda:1" for event in events for device in event[1:]), events
    assert [e[0] for e in events] == ["wait", "warm-up", "wait", "capture", "replay", "replay"]
    assert current == ["cuda:0"]  # the caller's device is current again
