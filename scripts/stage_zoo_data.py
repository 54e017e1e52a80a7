#!/usr/bin/env python3
"""Lays the local dataset copies out in each zoo data module's raw layout under a root, so that
``fastgnn-zoo fit ... --data.root <root> --data.download false`` trains with no network.

    python scripts/stage_zoo_data.py <root> [--source /work/shared/datasets]

The source is the datasets folder (default: ``FASTGNN_DATA``, as ``fastgnn.datasets`` finds
it). Files already staged are kept; datasets absent from the source are listed and skipped.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import zipfile
from typing import List, Tuple

#: (source path in the datasets folder, destination under the root, what it becomes)
PLANETOID = [(f"planetoid/{n}/raw", f"{n}/raw", f"Planetoid {n}") for n in ("Cora", "CiteSeer",
                                                                             "PubMed")]
SHCHUR = [("shchur/amazon-computers.zip", "Computers/raw", "Amazon Computers"),
          ("shchur/amazon-photo.zip", "Photo/raw", "Amazon Photo"),
          ("shchur/coauthor-cs.zip", "CS/raw", "Coauthor CS"),
          ("shchur/coauthor-physics.zip", "Physics/raw", "Coauthor Physics")]
HETEROPHILOUS = [(f"heterophilous/{f}.npz", f"{f}/raw/{f}.npz", f"Heterophilous {f}")
                 for f in ("roman_empire", "amazon_ratings", "minesweeper", "tolokers",
                           "questions", "actor", "squirrel_filtered", "chameleon_filtered")]
# OGB's layout (raw/, split/time/, RELEASE_v1.txt) without node-feat.csv.gz: train it with
# --data.random_features F
OGB = [("ogbn_arxiv_structure", "ogbn_arxiv", "ogbn-arxiv structure (random_features only)")]
#: copies no zoo data module reads (no labels, or no features and no zoo loader)
NOT_STAGED = ("flickr_structure", "roads")


def _copy_tree(src: str, dst: str) -> None:
    for dirpath, _, files in os.walk(src):
        target = os.path.join(dst, os.path.relpath(dirpath, src))
        os.makedirs(target, exist_ok=True)
        for file in files:
            out = os.path.join(target, file)
            if not os.path.exists(out):
                shutil.copy2(os.path.join(dirpath, file), out)


def stage(source: str, root: str) -> Tuple[List[str], List[str]]:
    """Stages every copy ``source`` has; returns (staged, absent) descriptions."""
    staged, absent = [], []
    for src, dst, what in PLANETOID + SHCHUR + HETEROPHILOUS + OGB:
        src_path, dst_path = os.path.join(source, src), os.path.join(root, dst)
        if not os.path.exists(src_path):
            absent.append(what)
            continue
        if os.path.isdir(src_path):
            _copy_tree(src_path, dst_path)
        elif src_path.endswith(".zip"):
            with zipfile.ZipFile(src_path) as archive:
                for member in archive.namelist():
                    if not os.path.exists(os.path.join(dst_path, member)):
                        archive.extract(member, dst_path)
        else:
            os.makedirs(os.path.dirname(dst_path), exist_ok=True)
            if not os.path.exists(dst_path):
                shutil.copy2(src_path, dst_path)
        staged.append(what)
    return staged, absent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the --data.root the zoo will read")
    parser.add_argument("--source", default=None,
                        help="the datasets folder (default: FASTGNN_DATA or ../shared/datasets)")
    args = parser.parse_args(argv)
    source = args.source
    if source is None:  # the project's rule for FASTGNN_DATA (imported only here: it loads torch)
        from fastgnn.datasets import data_root
        source = data_root()
    if not os.path.isdir(source):
        print(f"error: datasets folder {source} not found (set FASTGNN_DATA or --source)",
              file=sys.stderr)
        return 2
    staged, absent = stage(source, args.root)
    print(f"staged under {args.root}: {', '.join(staged) or 'nothing'}")
    if absent:
        print(f"not in {source}: {', '.join(absent)}")
    print(f"not staged (no zoo data module reads them): {', '.join(NOT_STAGED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
