"""Where a kernel's warps stall, per SASS instruction, from `ncu -i REP --page source --csv --print-source sass`
(twenty-sixth session; columns as ncu 2025 writes them: "Address", "Source", "Warp Stall Sampling (All
Samples)", stall_* per reason).
usage: python sass_stalls.py SASS_CSV [--top 25]
Prints the samples per stall reason over the kernel, then the top instructions with their three largest
reasons, in address order within the top (so a wait and the instructions around it read together)."""
import argparse
import csv
import gzip
import io

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--top", type=int, default=25)
args = ap.parse_args()
opener = gzip.open if args.csv.endswith(".gz") else open
with opener(args.csv, "rt") as f:
    lines = f.read().splitlines()
# ncu prints a "Kernel Name" line before each kernel's table; take the first table.
start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith('"Kernel Name"')), len(lines))
rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:end]))))
print(lines[start - 1][:200] if start else "")


def num(v):
    try:
        return float(v.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
total = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows)
print(f"{len(rows)} instructions, {total:.0f} samples")
sums = sorted(((sum(num(r[k]) for r in rows), k) for k in reasons), reverse=True)
print("  ".join(f"{k[6:]} {v / total:.1%}" for v, k in sums if v > 0.005 * total))
top = sorted(rows, key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))[: args.top]
for r in sorted(top, key=lambda r: int(r["Address"], 16) if r["Address"].startswith("0x") else num(r["Address"])):
    s = num(r["Warp Stall Sampling (All Samples)"])
    why = sorted(((num(r[k]), k[6:]) for k in reasons), reverse=True)[:3]
    print(f"{r['Address']:>8} {s / total:6.1%}  {r['Source'][:60]:60}  " + ", ".join(f"{k} {v / s:.0%}" for v, k in why if v))
