"""Sparse input features: the first layer (linear map of the input features, forward plus
weight backward) dense against SparseInputLinear, on real bag-of-words features, and a
training epoch of the zoo's GCN (fastgnn backend) on Coauthor-CS with ``sparse_inputs`` off
and on.

    python3 scripts/bench_sparse_inputs.py [--device cpu|cuda] [--width 64] [--rounds 5]
        [--calls N] [--datasets coauthor-cs coauthor-physics amazon-computers cora] [--no-epoch]

Reads ``$FASTGNN_DATA/shchur/*.zip`` (the npz of "Pitfalls of GNN evaluation") and
``$FASTGNN_DATA/planetoid/Cora/raw``. Prints a markdown table (first line: device, torch,
commit); times are medians over rounds in which the variants take turns, each round timing
``--calls`` calls of a variant (a sub-millisecond GPU call timed alone is mostly noise).
"""
from __future__ import annotations

import argparse
import io
import os
import pickle
import sys
import time
import warnings
import zipfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn import datasets, tuning  # noqa: E402
from fastgnn.bench import measure  # noqa: E402
from fastgnn.bench.report import describe_run  # noqa: E402
from fastgnn.nn import SparseInputLinear, feature_density  # noqa: E402
from fastgnn.nn.sparse_input import SparseFeatures, sparse_linear  # noqa: E402

SHCHUR = {"coauthor-cs": "coauthor-cs.zip", "coauthor-physics": "coauthor-physics.zip",
          "amazon-computers": "amazon-computers.zip"}


def load(name: str):
    """(features [N, F] float32, edge_index, labels) of a dataset."""
    root = datasets.data_root()
    if name in SHCHUR:
        with zipfile.ZipFile(os.path.join(root, "shchur", SHCHUR[name])) as z:
            d = np.load(io.BytesIO(z.read(z.namelist()[0])), allow_pickle=True)
        x = sp.csr_matrix((d["attr_data"], d["attr_indices"], d["attr_indptr"]),
                          shape=d["attr_shape"])
        adj = sp.csr_matrix((d["adj_data"], d["adj_indices"], d["adj_indptr"]),
                            shape=d["adj_shape"]).tocoo()
        edges = torch.from_numpy(np.stack([adj.row, adj.col]).astype(np.int64))
        edges = torch.cat([edges, edges.flip(0)], 1).unique(dim=1)  # symmetric, as PyG's
        return torch.from_numpy(x.toarray()).float(), edges, torch.from_numpy(d["labels"])
    if name == "cora":
        raw = os.path.join(root, "planetoid", "Cora", "raw")
        parts = []
        for part in ("allx", "tx"):
            with open(os.path.join(raw, f"ind.cora.{part}"), "rb") as f, warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # scipy's old pickle path
                parts.append(pickle.load(f, encoding="latin1"))
        g = datasets.cora()  # node order differs from the features': the layer sees no edges
        return torch.from_numpy(sp.vstack(parts).toarray()).float(), g.edge_index, None
    raise ValueError(f"unknown dataset {name!r}")


def first_layer(name, device, width, rounds, calls):
    x, _, _ = load(name)
    x = x.to(device)
    torch.manual_seed(0)
    dense = torch.nn.Linear(x.shape[1], width).to(device)
    swapped = fastgnn.enable(torch.nn.Linear(x.shape[1], width), sparse_inputs=True).to(device)
    swapped.load_state_dict(dense.state_dict())
    start = time.perf_counter()
    features = SparseFeatures.from_dense(x)
    convert_ms = (time.perf_counter() - start) * 1e3

    def step(layer):
        def run():
            layer.zero_grad(set_to_none=True)
            layer(x).sum().backward()
        return run

    def forced_sparse():
        w = dense.weight.detach().requires_grad_()
        sparse_linear(features, x, w, dense.bias).sum().backward()

    def repeated(fn):
        def run():
            for _ in range(calls):
                fn()
        return run

    start = time.perf_counter()
    step(swapped)()
    step(swapped)()  # second sight of x: converted, measured, decided
    decide_ms = (time.perf_counter() - start) * 1e3
    chosen = swapped.__dict__["_fastgnn_seen"].features
    choice = {k: v for k, v in tuning.choices(chosen.graph).items()
              if k.startswith("sparse_input_linear")} if chosen else {"-": "dense (cut-off)"}
    variants = {"dense": step(dense), "sparse": forced_sparse, "chosen": step(swapped)}
    times = measure.alternating_medians({k: repeated(v) for k, v in variants.items()}, device,
                                        rounds)
    return {"dataset": name, "nodes": x.shape[0], "features": x.shape[1],
            "density": feature_density(x), "choice": next(iter(choice.values())),
            "convert_ms": convert_ms, "decide_ms": decide_ms,
            **{k: v / calls for k, v in times.items()}}


def gcn_epoch(device, width, rounds, epochs):
    from fastgnn.zoo.module import build_model

    x, edge_index, y = load("coauthor-cs")
    x, edge_index, y = x.to(device), edge_index.to(device), y.to(device)

    def zoo_gcn(sparse_inputs):  # the zoo's GCN (2 layers, dropout 0.5), fastgnn backend
        model = build_model("gcn", x.shape[1], int(y.max()) + 1, "fastgnn", sparse_inputs,
                            hidden_channels=width, num_layers=2, dropout=0.5).to(device)
        return lambda: model(x, edge_index), model

    def trainer(built):
        forward, model = built
        opt = torch.optim.Adam(model.parameters(), lr=0.01)

        def epoch():
            for _ in range(epochs):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(forward(), y).backward()
                opt.step()
        return epoch

    torch.manual_seed(0)
    models = {"zoo gcn, sparse_inputs false": zoo_gcn(False),
              "zoo gcn, sparse_inputs true": zoo_gcn(True)}
    runs = {k: trainer(m) for k, m in models.items()}
    for run in runs.values():  # decide before timing
        run()
    times = measure.alternating_medians(runs, device, rounds)
    return {k: v / epochs for k, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--datasets", nargs="+",
                        default=["coauthor-cs", "coauthor-physics", "amazon-computers", "cora"])
    parser.add_argument("--no-epoch", action="store_true")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per timed sample")
    parser.add_argument("--calls", type=int, default=1,
                        help="first-layer calls per timed sample (10 or more on a GPU)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(describe_run(device) + f", {torch.get_num_threads()} threads, width {args.width}, "
          f"{args.rounds} rounds of {args.calls} calls")
    print()
    print("| dataset | nodes | features | non-zero | switch picks | dense ms | sparse ms | "
          "chosen ms | speedup (chosen vs dense) | CSR build ms | first calls ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        r = first_layer(name, device, args.width, args.rounds, args.calls)
        print(f"| {r['dataset']} | {r['nodes']} | {r['features']} | {100 * r['density']:.2f}% "
              f"| {r['choice']} | {r['dense']:.2f} | {r['sparse']:.2f} | {r['chosen']:.2f} | "
              f"{r['dense'] / r['chosen']:.2f}x | {r['convert_ms']:.1f} | {r['decide_ms']:.0f} |",
              flush=True)
    if not args.no_epoch:
        times = gcn_epoch(device, args.width, args.rounds, args.epochs)
        print()
        print("Zoo GCN training epoch on coauthor-cs (fastgnn backend, 2 layers, hidden "
              f"{args.width}, dropout 0.5, full batch, Adam), ms per epoch:")
        print()
        print("| model | ms / epoch |")
        print("|---|---|")
        for k, v in times.items():
            print(f"| {k} | {v:.1f} |")


if __name__ == "__main__":
    main()
