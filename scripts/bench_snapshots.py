"""Snapshot SpMM: a window of snapshots aggregated by one ``fastgnn.ops.spmm_snapshots`` call
against one ``fastgnn.ops.spmm`` call per snapshot and against PyG Temporal's way (one PyG
``GCNConv`` call per snapshot, with ``SnapshotGCNConv`` as our side of that row), plus the
host-to-device bytes of sliding the window by one.

    python3 scripts/bench_snapshots.py [--device cuda] [--snapshots 8] [--overlap 0.9]
        [--widths 64 256] [--rounds 7] [--graph arxiv|roads] [--features per-snapshot static]

The window: ``--snapshots`` prefixes of the graph's edges in arrival order (ogbn-arxiv: the
later of the two papers' years; roads: file order), the first ``--overlap`` of the edges
shared by all. norm="both". Features: T different ``[N, F]`` matrices (per-snapshot), or one
shared by every snapshot (static node features, as in the first layer of a T-GCN on arxiv:
``spmm_snapshots`` gets it expanded, with a snapshot stride of 0). Times are medians over
rounds in which the variants take turns.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn import datasets  # noqa: E402
from fastgnn.bench import measure  # noqa: E402
from fastgnn.bench.report import describe_run  # noqa: E402
from fastgnn.nn import SnapshotGCNConv  # noqa: E402
from fastgnn.nn.arrivals import arxiv_by_year, prefix_window  # noqa: E402


def arrivals(name):
    if name == "arxiv":
        edges, _, n = arxiv_by_year()
        return edges, n
    g = datasets.roads()
    return g.edge_index, g.num_nodes


def run_width(args, sg, graphs, device_lists, T, n, width, static, device):
    """Medians of every variant at one width; ``static``: one [N, F] feature matrix shared by
    every snapshot (an expanded tensor for spmm_snapshots, the same x for each per-snapshot
    call), else T different ones."""
    torch.manual_seed(0)
    leaf = torch.randn(n, width, device=device) if static else \
        torch.randn(T, n, width, device=device)
    leaf_grad = leaf.clone().requires_grad_()
    spread = (lambda x: x.expand(T, -1, -1)) if static else (lambda x: x)  # noqa: E731
    xs, xs_grad = spread(leaf), spread(leaf_grad)
    grad = torch.randn(T, n, width, device=device)
    ours_conv = SnapshotGCNConv(width, width).to(device)
    pyg = None
    if not args.no_pyg:
        import torch_geometric.nn as pyg_nn
        pyg = pyg_nn.GCNConv(width, width, add_self_loops=False).to(device)
        pyg.load_state_dict({"lin.weight": ours_conv.lin.weight, "bias": ours_conv.bias})

    def fwd_ours():
        with torch.no_grad():
            fastgnn.ops.spmm_snapshots(sg, xs, "both")

    def fwd_each():
        with torch.no_grad():
            for g, x in zip(graphs, xs):
                fastgnn.ops.spmm(g, x, "both")

    def train_ours():
        torch.autograd.grad(fastgnn.ops.spmm_snapshots(sg, xs_grad, "both"), leaf_grad, grad)

    def train_each():
        out = torch.stack([fastgnn.ops.spmm(g, x, "both") for g, x in zip(graphs, xs_grad)])
        torch.autograd.grad(out, leaf_grad, grad)

    def layer_ours(train):
        def run():
            with torch.set_grad_enabled(train):
                # static features: the [N, F] itself (x W computed once)
                out = ours_conv(sg, leaf_grad if train else leaf)
                if train:
                    out.backward(grad)
        return run

    def layer_pyg(train):
        def run():
            with torch.set_grad_enabled(train):
                out = torch.stack([pyg(x, ei) for ei, x in
                                   zip(device_lists, xs_grad if train else xs)])
                if train:
                    out.backward(grad)
        return run

    rows = []
    for label, train in (("forward", False), ("forward+backward", True)):
        fns = {"ours": train_ours if train else fwd_ours,
               "each": train_each if train else fwd_each}
        if pyg is not None:
            fns.update({"conv": layer_ours(train), "pyg": layer_pyg(train)})
        rows.append((label, measure.alternating_medians(fns, device, args.rounds, warmup=2)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--graph", default="arxiv", choices=("arxiv", "roads"))
    parser.add_argument("--snapshots", type=int, default=8)
    parser.add_argument("--overlap", type=float, default=0.9)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-pyg", action="store_true")
    parser.add_argument("--features", nargs="+", default=["per-snapshot", "static"],
                        choices=("per-snapshot", "static"))
    args = parser.parse_args()
    device = torch.device(args.device)
    edges, n = arrivals(args.graph)
    T = args.snapshots
    # one more prefix than the window, so that the window can slide by one
    lists = prefix_window(edges, T + 1, args.overlap)
    window = lists[:T]
    sg = fastgnn.SnapshotGraph(window, n, device=device)
    graphs = [fastgnn.Graph.from_edge_index(ei.to(device), num_nodes=n) for ei in window]
    device_lists = [ei.to(device) for ei in window]
    print(describe_run(device) + f", {torch.get_num_threads()} threads")
    print(f"\n{args.graph}: {n} nodes; window of {T} prefixes with {sg.num_edges} distinct "
          f"edges, {sg.num_shared_edges} shared ({100 * sg.num_shared_edges / sg.num_edges:.1f}%)"
          f", snapshots of {window[0].shape[1]} to {window[-1].shape[1]} edges; norm both; "
          f"{args.rounds} rounds\n")
    print("| width | features | pass | spmm_snapshots ms | 8 x fastgnn spmm ms | speedup | "
          "SnapshotGCNConv ms | 8 x PyG GCNConv ms | speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for width in args.widths:
        for kind in args.features:
            row = run_width(args, sg, graphs, device_lists, T, n, width, kind == "static",
                            device)
            for label, t in row:
                conv = (f"{t['conv']:.2f} | {t['pyg']:.2f} | {t['pyg'] / t['conv']:.2f}x"
                        if "pyg" in t else "- | - | -")
                print(f"| {width} | {kind} | {label} | {t['ours']:.2f} | {t['each']:.2f} | "
                      f"{t['each'] / t['ours']:.2f}x | {conv} |", flush=True)

    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    slid = sg.slide(lists[T])
    slid.structure()
    if device.type == "cuda":
        torch.cuda.synchronize()
    slide_ms = (time.perf_counter() - start) * 1e3
    ei_bytes = lambda ei: ei.numel() * ei.element_size()  # noqa: E731
    print(f"\nHost to device: building the window moved {sg.bytes_uploaded / 2**20:.2f} MiB; "
          f"sliding it by one moved {slid.bytes_uploaded / 2**20:.3f} MiB ({slide_ms:.0f} ms "
          f"including the new structure), where the new snapshot's edge_index alone is "
          f"{ei_bytes(lists[T]) / 2**20:.2f} MiB and the whole window's edge lists "
          f"(what a per-snapshot loop moves each step) {sum(map(ei_bytes, lists[1:])) / 2**20:.2f} MiB.")


if __name__ == "__main__":
    main()
