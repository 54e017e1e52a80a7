"""End-to-end mini-batch training: GraphSAGE (3 layers, 256 hidden, fastgnn-enabled PyG
SAGEConv on sampled blocks) on a synthetic ogbn-products-sized graph (2.4M nodes, 60M edges,
random features and labels), with the sampler on the CPU or on the GPU.

    python scripts/bench_minibatch.py --sampler gpu --sampler cpu      # on a GPU machine

Per sampler: epoch time, steps per second, and the share of the epoch the training loop spent
waiting for the next batch (the loader samples and gathers on a background thread; each step
ends with a device sync, so waiting is not hidden behind queued GPU work).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_geometric.nn as pyg_nn  # noqa: E402

import fastgnn  # noqa: E402
import fastgnn.pyg  # noqa: E402
from fastgnn.bench.report import device_name, device_tag, git_commit  # noqa: E402
from fastgnn.sampling import NeighborLoader  # noqa: E402


class BlockSAGE(torch.nn.Module):
    """GraphSAGE over per-layer blocks: layer i maps blocks[i]'s sources to its destinations."""

    def __init__(self, in_dim, hidden, out_dim, layers=3):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(pyg_nn.SAGEConv(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x, blocks):
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            x = conv((x, x[: block.num_dst_nodes]), block)
            if i + 1 < len(self.convs):
                x = F.relu(x)
        return x


def synthetic(nodes, edges, features, classes, device):
    gen = torch.Generator(device).manual_seed(0)
    ei = torch.randint(0, nodes, (2, edges), generator=gen, device=device)
    graph = fastgnn.Graph.from_edge_index(ei, num_nodes=nodes)
    del ei
    x = torch.randn(nodes, features, generator=gen, device=device)
    y = torch.randint(0, classes, (nodes,), generator=gen, device=device)
    return graph, x, y


def run_epoch(model, opt, loader, device, max_batches):
    waited, steps = 0.0, 0
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    it = iter(loader)
    while steps < max_batches:
        t = time.perf_counter()
        batch = next(it, None)
        waited += time.perf_counter() - t
        if batch is None:
            break
        loss = F.cross_entropy(model(batch.x, batch.blocks), batch.y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize(device)
        steps += 1
    if hasattr(it, "close"):
        it.close()
    return time.perf_counter() - start, waited, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2_400_000)
    parser.add_argument("--edges", type=int, default=60_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--classes", type=int, default=47)
    parser.add_argument("--train-nodes", type=int, default=196_615)  # ogbn-products' split
    parser.add_argument("--fanouts", default="5,10,15", help="per layer, input layer first")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2, help="the first is a warm-up")
    parser.add_argument("--max-batches", type=int, default=10**9)
    parser.add_argument("--sampler", action="append", choices=["gpu", "cpu"])
    parser.add_argument("--cpu-threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device("cuda")
    fanouts = [int(f) for f in args.fanouts.split(",")]
    graph, x, y = synthetic(args.nodes, args.edges, args.features, args.classes, device)
    train = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(1))[
        : args.train_nodes]
    rows = []
    for where in args.sampler or ["gpu", "cpu"]:
        if where == "gpu":
            loader = NeighborLoader(graph, fanouts, train, batch_size=args.batch_size,
                                    shuffle=True, features=x, labels=y, device=device)
        else:
            torch.set_num_threads(args.cpu_threads)
            loader = NeighborLoader(graph.cpu(), fanouts, train, batch_size=args.batch_size,
                                    shuffle=True, features=x.cpu().pin_memory(),
                                    labels=y.cpu().pin_memory(), device=device)
        torch.manual_seed(0)
        model = fastgnn.enable(BlockSAGE(args.features, 256, args.classes)).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            seconds, waited, steps = run_epoch(model, opt, loader, device, args.max_batches)
            print(f"sampler={where} epoch {epoch}: {seconds:.2f} s for {steps} steps "
                  f"({steps / seconds:.1f} steps/s), "
                  f"waiting for data {100 * waited / seconds:.1f}%")
        rows.append({"sampler": where, "epoch_s": seconds, "steps": steps,
                     "steps_per_s": steps / seconds, "wait_share": waited / seconds,
                     "cpu_threads": args.cpu_threads if where == "cpu" else None})
    env = {"nodes": args.nodes, "edges": args.edges, "features": args.features,
           "fanouts": fanouts, "batch_size": args.batch_size, "train_nodes": args.train_nodes,
           "model": "GraphSAGE 3x256 (fastgnn-enabled SAGEConv on blocks)",
           "device_name": device_name(device), "torch": torch.__version__,
           "fastgnn_commit": git_commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    out = args.out or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
        f"{env['date'][:10]}-{device_tag(device)}-minibatch.jsonl")
    with open(out, "a") as f:
        for row in rows:
            f.write(json.dumps({**row, **env}) + "\n")
    print("appended to", out)


if __name__ == "__main__":
    main()
