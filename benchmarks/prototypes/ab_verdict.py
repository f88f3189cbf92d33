"""The A/B verdict on a pdl_ab_s21.py log (twenty-fourth session; next_s28.sh and next_s28c.sh shared it).

    python ab_verdict.py AB_FILE [--rows N] [--versus A,B] [--worst 3]

Per variant: the geomean of its graph-replay ratios against base, over the 16-bit rows too, and its
consistent losses (a row above 1.02 whose every round is slower than the base's slowest). A variant wins
with the geomean <= 0.99, no consistent loss and, with --rows, exactly N rows (a failed row reads nan).
--versus A,B prints B's ratio over A's, row by row.
"""
import argparse, collections, math, re

ap = argparse.ArgumentParser()
ap.add_argument("ab_file")
ap.add_argument("--rows", type=int, default=0)
ap.add_argument("--versus", default="")
ap.add_argument("--worst", type=int, default=3)
a = ap.parse_args()


def geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v and all(x == x for x in v) else float("nan")


rows = collections.defaultdict(list)
for line in open(a.ab_file):
    if " || " not in line:
        continue
    rounds = {m.group(1): [float(g) for g in re.findall(r"[0-9.]+/([0-9.a-z]+)", m.group(2))]
              for m in re.finditer(r"(\w+):\[([^\]]*)\]", line.split(" || ")[1])}
    for m in re.finditer(r"(\w+)/base ([0-9.a-z]+)/([0-9.a-z]+)", line):
        name, ratio = m.group(1), float(m.group(3))
        consistent = ratio > 1.02 and min(rounds.get(name, [0])) > max(rounds.get("base", [0]))
        rows[name].append((ratio, consistent, line.split("|")[0].strip()))
for name, r in rows.items():
    g = geomean([x for x, _, _ in r])
    g16 = geomean([x for x, _, t in r if ("bfloat16" in t or "float16" in t) and x == x])
    losses = [t for x, c, t in r if c]
    win = g <= 0.99 and not losses and (not a.rows or len(r) == a.rows)
    print(f"{name}: rows {len(r)} geomean(graph) {g:.3f} (16-bit rows {g16:.3f}) consistent losses {len(losses)} "
          f"{'WINNER' if win else 'no'}; worst "
          + "; ".join(f"{x:.3f}{'*' if c else ''} {t}" for x, c, t in sorted(r, reverse=True)[:a.worst]))
if a.versus:
    first, second = a.versus.split(",")
    for (x, _, t), (y, _, _) in zip(rows[first], rows[second]):
        print(f"  {second}/{first} {y / x:.3f}  {t}")
