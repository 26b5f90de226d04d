"""The `queued` workload's runs for two or more checkouts in turns: a change to the sending path against the commit before it.

    git worktree add /tmp/before <commit> && ln -s $PWD/.venv /tmp/before/.venv
    bench/.venv/bin/python -m bench.queued_pair --product before=/tmp/before --product after=. [--rounds 3]

The same seeding, processes and timing as bench/workloads/queued.py (its `run_once`:
deliveries QUEUED and due, then 1 or 2 `run_worker` of each checkout timed whole from
their spawn to the last key at the harness's nginx), at the sizes issue 36 names
(20,000 and 100,000 queued, 1 and 2 workers), the checkouts in turn within each round,
their order rotating. Prints each run and the medians with each checkout's ratio to the
first, and what each delivery wrote (rows, WAL bytes and index entries, from the server's
counters: queued.run_once); writes bench/results/raw/queued-pair.json.
"""

from __future__ import annotations

import argparse
import json
import secrets

from bench.harness import Harness, log
from bench.locations import RAW
from bench.products import Product, products_parse
from bench.stats import median
from bench.workloads import queued


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--product", action="append", default=[], metavar="LABEL=PATH", required=True)
    parser.add_argument("--sizes", default="20000,100000")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    products = products_parse(args.product, default=Product("this", queued.ROOT))
    sizes = [int(n) for n in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    harness = Harness(size="pair", sizes={})
    harness.setup()
    secret_key = secrets.token_urlsafe(50)
    runs: list[dict] = []
    try:
        for product in products:
            queued.prepare(harness, product, secret_key=secret_key)
        envs = {p.label: queued.product_env(harness, label=p.label, secret_key=secret_key) for p in products}
        for round_ in range(args.rounds):
            for n in sizes:
                for count in workers:
                    shift = round_ % len(products)
                    for product in products[shift:] + products[:shift]:
                        run = queued.run_once(
                            harness,
                            variant=product.label,
                            product=product,
                            n=n,
                            workers=count,
                            env=envs[product.label],
                        )
                        run["round"] = round_ + 1
                        runs.append(run)
                        log(
                            f"pair: {product.label} {count}w {n:,}: {run['rate']:,.0f}/s, CPU "
                            f"{run['cpu_ms_per_delivery'] or 0:.3f} + PG {run['pg_cpu_ms_per_delivery'] or 0:.3f} ms, "
                            f"{_fx(run['rows_per_delivery'])} rows, {_fx(run['wal_bytes_per_delivery'], '{:,.0f}')} WAL bytes, "
                            f"{_fx(run['index_entries_per_delivery'])} index entries per delivery, "
                            f"missing {run['missing']}, twice {run['duplicates']}, not DELIVERED {run['not_delivered']}"
                        )
    finally:
        for product in products:
            queued.drop(product.label)
        harness.teardown()
    first = products[0].label
    summary = []
    for n in sizes:
        for count in workers:
            cell = {
                p.label: [
                    r for r in runs if r["n"] == n and r["workers"] == count and r["variant"] == p.label
                ]
                for p in products
            }
            base = median(r["rate"] for r in cell[first])
            for product in products:
                rates = [r["rate"] for r in cell[product.label]]
                line = {
                    "n": n,
                    "workers": count,
                    "product": product.label,
                    "commit": product.commit(),
                    "rate": median(rates),
                    "rates": rates,
                    "ratio": median(rates) / base,
                    "by_round": [
                        r["rate"] / b["rate"] for r, b in zip(cell[product.label], cell[first], strict=True)
                    ],
                    "cpu_ms": median(r["cpu_ms_per_delivery"] for r in cell[product.label]),
                    "pg_cpu_ms": median(r["pg_cpu_ms_per_delivery"] for r in cell[product.label]),
                    # What each delivery wrote, from the server's counters (queued.run_once).
                    "rows": _median_of(cell[product.label], "rows_per_delivery"),
                    "wal_bytes": _median_of(cell[product.label], "wal_bytes_per_delivery"),
                    "index_entries": _median_of(cell[product.label], "index_entries_per_delivery"),
                    "load": [
                        min(r["load_before"][0] for r in cell[product.label]),
                        max(r["load_after"][0] for r in cell[product.label]),
                    ],
                }
                summary.append(line)
                print(
                    f"{n:>7,} {count}w {product.label:>8} {line['commit']:>9}: {line['rate']:7,.0f}/s "
                    f"({', '.join(f'{x:,.0f}' for x in rates)}) = {line['ratio']:.2f}x {first} "
                    f"({', '.join(f'{x:.2f}' for x in line['by_round'])}); CPU {line['cpu_ms']:.3f} + PG "
                    f"{line['pg_cpu_ms']:.3f} ms/delivery; per delivery {_fx(line['rows'])} rows, "
                    f"{_fx(line['wal_bytes'], '{:,.0f}')} WAL bytes, {_fx(line['index_entries'])} index entries; load {line['load'][0]:.1f}-{line['load'][1]:.1f}",
                    flush=True,
                )
    RAW.mkdir(parents=True, exist_ok=True)
    (RAW / "queued-pair.json").write_text(
        json.dumps({"summary": summary, "runs": runs}, indent=1, default=str)
    )


def _median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return median(values) if values else None


def _fx(value: float | None, pattern: str = "{:.2f}") -> str:
    return pattern.format(value) if value is not None else "-"


if __name__ == "__main__":
    main()
