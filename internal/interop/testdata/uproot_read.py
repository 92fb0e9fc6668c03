"""Read the demo ROOT file over HTTP with uproot and check every value.

Usage: python3 uproot_read.py URL {fsspec|http|file}

"fsspec" opens the file with uproot's default handler for http URLs (fsspec,
aiohttp, one range per request); "http" forces uproot.source.http.HTTPSource,
which asks for many ranges per request (multipart/byteranges); "file" reads
a local path (a file on a FUSE mount) with uproot's default local source.

The expected values follow the formulas of demo.Event (internal/demo/data.go):

    run   = 1 + i/10000        (int32)
    event = i                  (int64)
    px    = i * 0.5            (float64)
    e     = (i % 100) * 1.25   (float32)
    nhits = i % 5              (int32)
    hits  = [i + j for j in 0..nhits-1] (float32, variable length)

Prints one JSON object on stdout; exits 1 if any value differs.
"""

import json
import sys
import time

import awkward as ak
import numpy as np
import uproot

BRANCHES = ["run", "event", "px", "e", "nhits", "hits"]


def expected(n):
    i = np.arange(n, dtype=np.int64)
    nhits = (i % 5).astype(np.int32)
    starts = np.repeat(np.cumsum(nhits) - nhits, nhits)
    j = np.arange(int(nhits.sum()), dtype=np.int64) - starts
    return {
        "run": (1 + i // 10000).astype(np.int32),
        "event": i,
        "px": i.astype(np.float64) * 0.5,
        "e": (i % 100).astype(np.float32) * np.float32(1.25),
        "nhits": nhits,
        "hits_counts": nhits.astype(np.int64),
        "hits_flat": (np.repeat(i, nhits) + j).astype(np.float32),
    }


def compare(name, got, want, errors):
    got = np.asarray(got)
    if got.shape != want.shape:
        errors.append(f"{name}: shape {got.shape}, want {want.shape}")
        return
    if got.dtype != want.dtype:
        errors.append(f"{name}: dtype {got.dtype}, want {want.dtype}")
    bad = np.flatnonzero(got != want)
    if bad.size:
        k = int(bad[0])
        errors.append(f"{name}: {bad.size} values differ, first at {k}: got {got[k]!r}, want {want[k]!r}")


def main():
    url, mode = sys.argv[1], sys.argv[2]
    opts = {"timeout": 60}
    if mode == "http":
        opts["handler"] = uproot.source.http.HTTPSource
    elif mode == "file":
        opts = {}
    elif mode != "fsspec":
        sys.exit(f"unknown mode {mode!r}")

    t0 = time.monotonic()
    errors = []
    with uproot.open(url, **opts) as f:
        source = f.file.source
        tree = f["events"]
        n = int(tree.num_entries)
        names = sorted(tree.keys())
        arrays = tree.arrays(BRANCHES, library="ak")
        want = expected(n)
        for b in ["run", "event", "px", "e", "nhits"]:
            compare(b, ak.to_numpy(arrays[b]), want[b], errors)
        hits = arrays["hits"]
        compare("hits counts", ak.to_numpy(ak.num(hits, axis=1)), want["hits_counts"], errors)
        compare("hits values", ak.to_numpy(ak.flatten(hits)), want["hits_flat"], errors)
        summary = {
            "mode": mode,
            "source": type(source).__name__,
            "entries": n,
            "branches": names,
            "hits_total": int(ak.sum(ak.num(hits, axis=1))),
            "px_sum": float(np.sum(ak.to_numpy(arrays["px"]))),
            "num_requests": int(getattr(source, "num_requests", -1)),
            "num_requested_chunks": int(getattr(source, "num_requested_chunks", -1)),
            "num_requested_bytes": int(getattr(source, "num_requested_bytes", -1)),
            "fallback": getattr(source, "_fallback", None) is not None,
        }
    summary["seconds"] = round(time.monotonic() - t0, 3)
    summary["errors"] = errors
    summary["ok"] = not errors
    print(json.dumps(summary))
    sys.exit(0 if not errors else 1)


if __name__ == "__main__":
    main()
