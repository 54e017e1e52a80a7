"""Trains a GCN + GRU (fastgnn.nn.SnapshotGCNGRU) on ogbn-arxiv as a dynamic graph: a
citation arrives with the later of its two papers' years, snapshot ``Y`` holds every edge
that arrived by year ``Y``, and the window of ``--window`` yearly snapshots slides one year
at a time (``SnapshotGraph.slide``: only the change crosses to the device). The task is
arxiv's: each paper's subject (40 classes), official time split (train to 2017, valid 2018,
test 2019-2020). arxiv's node features are not in the local copy, so each node gets a
learned embedding plus, per snapshot, its log-degree and whether it exists yet.

    python3 scripts/train_snapshots.py [--device cuda] [--window 4] [--epochs 5]
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn import datasets  # noqa: E402
from fastgnn.nn import SnapshotGCNGRU  # noqa: E402
from fastgnn.nn.arrivals import arxiv_by_year, year_snapshots  # noqa: E402


def split(name: str) -> torch.Tensor:
    path = os.path.join(datasets.data_root(), "ogbn_arxiv_structure", "split", "time",
                        f"{name}.csv.gz")
    with gzip.open(path) as f:
        return torch.from_numpy(np.loadtxt(f, dtype=np.int64).reshape(-1))


class Features(torch.nn.Module):
    """Per snapshot: a learned node embedding, log(1 + degree) and an exists-yet flag."""

    def __init__(self, num_nodes: int, dim: int):
        super().__init__()
        self.embedding = torch.nn.Embedding(num_nodes, dim)

    def forward(self, sg: fastgnn.SnapshotGraph) -> torch.Tensor:
        in_degree, _ = sg.degrees()
        degree = torch.log1p(in_degree.float()).unsqueeze(-1)
        emb = self.embedding.weight.expand(sg.num_snapshots, -1, -1)
        return torch.cat([emb, degree, (in_degree > 0).float().unsqueeze(-1)], dim=-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--embedding", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)

    edges, edge_year, num_nodes = arxiv_by_year()
    y = datasets.ogbn_arxiv().y.to(device)
    train, valid, test = (split(s).to(device) for s in ("train", "valid", "test"))
    years = list(range(2020 - args.window - 2, 2021))  # windows ending 2018, 2019 and 2020
    snapshots = year_snapshots(edges, edge_year, years)
    print(f"ogbn-arxiv by year: {num_nodes} nodes, snapshots {years[0]}-{years[-1]} with "
          f"{[s.shape[1] for s in snapshots]} edges; window {args.window}")

    features = Features(num_nodes, args.embedding).to(device)
    model = SnapshotGCNGRU(args.embedding + 2, args.hidden, int(y.max()) + 1, dropout=0.2).to(device)
    params = list(features.parameters()) + list(model.parameters())
    opt = torch.optim.Adam(params, lr=args.lr)

    first = fastgnn.SnapshotGraph(snapshots[:args.window], num_nodes, device=device)
    print(f"first window: {first}, {first.bytes_uploaded / 2**20:.1f} MiB to the device")

    def windows():
        sg = first  # built once: each epoch slides from it again
        yield sg, years[args.window - 1]
        for t in range(args.window, len(snapshots)):
            sg = sg.slide(snapshots[t])
            yield sg, years[t]

    for epoch in range(args.epochs):
        model.train()
        start, uploaded, losses = time.perf_counter(), 0, []
        for sg, last_year in windows():
            uploaded += sg.bytes_uploaded if sg is not first else 0
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(sg, features(sg))[train], y[train])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            pred = model(sg, features(sg)).argmax(-1)  # the last window, ending in 2020
        acc = {name: float((pred[idx] == y[idx]).float().mean())
               for name, idx in (("train", train), ("valid", valid), ("test", test))}
        print(f"epoch {epoch}: loss {np.mean(losses):.3f}, accuracy train {acc['train']:.3f} "
              f"valid {acc['valid']:.3f} test {acc['test']:.3f}, "
              f"{time.perf_counter() - start:.1f} s, slides moved {uploaded / 2**20:.2f} MiB",
              flush=True)


if __name__ == "__main__":
    main()
