"""fastgnn.snapshot_windows: windows of a PyTorch Geometric Temporal-shaped signal (a stand-in
class with DynamicGraphTemporalSignal's attributes: torch_geometric_temporal itself does not
install against current torch) and of plain lists of edge_index tensors."""
import numpy as np
import pytest
import torch

import fastgnn

from conftest import devices, random_edge_index

N = 20


class DynamicGraphTemporalSignal:
    """The attributes of torch_geometric_temporal.signal.DynamicGraphTemporalSignal: NumPy
    arrays per snapshot."""

    def __init__(self, edge_indices, edge_weights, features, targets):
        self.edge_indices = edge_indices
        self.edge_weights = edge_weights
        self.features = features
        self.targets = targets


def edge_lists(count=6):
    core = random_edge_index(N, N, 40, seed=0)
    return [torch.cat([core, random_edge_index(N, N, 5, seed=10 + t, hub=False)], dim=1)
            for t in range(count)]


def edge_set(edge_index):
    return sorted(map(tuple, edge_index.t().tolist()))


def signal(lists, weights=None):
    rng = np.random.default_rng(0)
    return DynamicGraphTemporalSignal(
        [e.numpy() for e in lists],
        weights or [np.ones(e.shape[1], dtype=np.float32) for e in lists],
        [rng.normal(size=(N, 3)).astype(np.float32) for _ in lists],
        [rng.normal(size=N).astype(np.float32) for _ in lists])


@pytest.mark.parametrize("device", devices())
def test_windows_of_a_temporal_signal(device):
    lists = edge_lists()
    sig = signal(lists)
    windows = list(fastgnn.snapshot_windows(sig, 3, device=device))
    assert [w.end for w in windows] == [2, 3, 4, 5]
    for w in windows:
        assert w.graph.num_snapshots == 3 and w.graph.num_nodes == N
        assert w.graph.device.type == device
        for t in range(3):
            assert edge_set(w.graph.edge_index(t).cpu()) == edge_set(lists[w.end - 2 + t])
        want = torch.stack([torch.from_numpy(x) for x in sig.features[w.end - 2:w.end + 1]])
        torch.testing.assert_close(w.features.cpu(), want)
        torch.testing.assert_close(w.target.cpu(), torch.from_numpy(sig.targets[w.end]))
        out = fastgnn.ops.spmm_snapshots(w.graph, w.features, "both")
        assert out.shape == (3, N, 3)
    assert windows[1].graph.bytes_uploaded <= windows[0].graph.bytes_uploaded  # slid


def test_plain_edge_index_lists():
    lists = edge_lists(4)
    windows = list(fastgnn.snapshot_windows(lists, 4))
    assert len(windows) == 1 and windows[0].features is None and windows[0].target is None
    expected_nodes = 1 + max(int(e.max()) for e in lists)
    assert windows[0].graph.num_nodes == expected_nodes
    assert list(fastgnn.snapshot_windows(lists, 2, num_nodes=N))[0].graph.num_nodes == N


def test_bad_signals():
    lists = edge_lists(3)
    with pytest.raises(TypeError, match="signal must be a list of edge_index tensors"):
        fastgnn.snapshot_windows(lists[0], 2)
    with pytest.raises(ValueError, match=r"window must be an int from 1 to 3 \(the signal has 3"):
        fastgnn.snapshot_windows(lists, 4)
    with pytest.raises(ValueError, match="window must be"):
        fastgnn.snapshot_windows(lists, True)
    weighted = signal(lists, [np.full(e.shape[1], 0.5, dtype=np.float32) for e in lists])
    with pytest.raises(ValueError, match=r"edge_weights\[0\] is not all ones"):
        fastgnn.snapshot_windows(weighted, 2)
    assert len(list(fastgnn.snapshot_windows(weighted, 2, ignore_edge_weights=True))) == 2
    short = signal(lists)
    short.targets = short.targets[:2]
    with pytest.raises(ValueError, match="signal.targets has 2 entries"):
        fastgnn.snapshot_windows(short, 2)
    with pytest.raises(ValueError, match=r"edge_indices\[1\] is None"):
        fastgnn.snapshot_windows([lists[0], None], 1)
