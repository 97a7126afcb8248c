"""Per-kernel summary of bench/ncu_decode.sh's CSV (ncu --csv --page raw):
launches, mean duration, DRAM bytes read, achieved TB/s and DRAM throughput
as a share of peak, sorted by total time.

    python3 bench/ncu_summary.py ncu-decode.csv
"""
import collections
import csv
import sys


def main(path: str) -> None:
    rows = list(csv.reader(open(path)))
    h = next(k for k, r in enumerate(rows) if r and r[0] == "ID")
    hdr = rows[h]
    col = {x: k for k, x in enumerate(hdr)}
    num = lambda s: float(s.replace(",", ""))
    agg = collections.defaultdict(list)
    for r in rows[h + 2:]:  # after the header and the units row
        if len(r) != len(hdr):
            continue
        agg[r[col["Kernel Name"]]].append(
            (num(r[col["gpu__time_duration.sum"]]), num(r[col["dram__bytes_read.sum"]]),
             num(r[col["dram__throughput.avg.pct_of_peak_sustained_elapsed"]]), r[col["Grid Size"]]))
    print(f"{'kernel':28s} {'launches':>8s} {'mean us':>9s} {'MB read':>9s} {'TB/s':>6s} {'% DRAM peak':>11s}  grid")
    for name, v in sorted(agg.items(), key=lambda kv: -sum(x[0] for x in kv[1])):
        n = len(v)
        t = sum(x[0] for x in v) / n
        b = sum(x[1] for x in v) / n
        p = sum(x[2] for x in v) / n
        print(f"{name:28s} {n:8d} {t / 1e3:9.2f} {b / 1e6:9.2f} {b / t / 1e3:6.2f} {p:11.1f}  {v[0][3]}")


if __name__ == "__main__":
    main(sys.argv[1])
