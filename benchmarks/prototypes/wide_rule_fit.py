"""Candidate rules for choosing the forward's wide stream plans (K=16), scored on tune.py logs (CPU only;
twenty-seventh session, for next_s32b.sh's grid).

    python wide_rule_fit.py GRAPH_LOG [DOBENCH_LOG]

Each log is `tune.py --match stream --top 40` output (every stream candidate's time, and the default's).
A rule sees the shape, dtype and default plan and names a plan (or keeps the default); its score per
timer is the geomean of chosen / default over the shapes whose default is a K=8 stream plan, the worst
ratio and the number of rows above 1.02. Resident clusters per cluster size are the H200's as observed
(one CTA an SM: 66, 33, 16 and 7 clusters of 2, 4, 8 and 16), not queried.
"""
import math
import re
import sys

RESIDENT = {2: 66, 4: 33, 8: 16, 16: 7}
HEADER = re.compile(r"(\w+) \(([\d, ]+)\) forward act=(\S+) default=(\S+) floor=([\d.]+) ms")
ROW = re.compile(r"^\s+(stream\(\S+\)|default)\s+([\d.]+) ms")
PLAN = re.compile(r"stream\(CS=(\d+),S=(\d+)(?:,K=(\d+))?\)")


def parse(path):
    rows = {}
    key = None
    for line in open(path):
        h = HEADER.match(line)
        if h:
            shape = tuple(int(v) for v in h.group(2).split(","))
            key = (h.group(1), shape, h.group(3))
            rows[key] = {"default_plan": h.group(4), "times": {}}
            continue
        r = ROW.match(line)
        if r and key:
            rows[key]["times"][r.group(1)] = float(r.group(2))
    return rows


def features(dtype, shape, plan):
    m = PLAN.match(plan)
    if not m or (m.group(3) or "8") != "8":
        return None
    cs, stages = int(m.group(1)), int(m.group(2))
    vec = 4 if dtype == "float32" else 8
    instances = shape[0] * shape[1]
    vectors = shape[2] * shape[3] // vec
    per_thread = math.ceil(vectors / cs) / 512
    waves8 = math.ceil(instances / RESIDENT[cs])
    half = cs // 2
    waves16 = math.ceil(instances / RESIDENT[half]) if half in RESIDENT else None
    return dict(cs=cs, stages=stages, instances=instances, per_thread=per_thread, waves8=waves8, waves16=waves16,
                half=half)


def best_wide(times, cluster):
    cands = [(t, p) for p, t in times.items() if p.startswith(f"stream(CS={cluster},") and p.endswith(",K=16)")]
    return min(cands)[1] if cands else None


RULES = {
    "never": lambda f: False,
    "waves 2+ -> 1": lambda f: f["waves16"] == 1 and f["waves8"] > 1,
    "CS=16, waves 2+ -> 1": lambda f: f["cs"] == 16 and f["waves16"] == 1 and f["waves8"] > 1,
    "uneven K=8, one wave": lambda f: f["waves16"] == 1 and f["per_thread"] != int(f["per_thread"]),
    "CS=16 2+->1 or uneven 1 wave": lambda f: f["waves16"] == 1 and (
        (f["cs"] == 16 and f["waves8"] > 1) or f["per_thread"] != int(f["per_thread"])),
    "K=8 slice > half, one wave": lambda f: f["waves16"] == 1 and f["per_thread"] > 4,
}


def score(rows, rule):
    ratios, picks = [], []
    for (dtype, shape, act), row in rows.items():
        f = features(dtype, shape, row["default_plan"])
        if f is None or f["waves16"] is None or "default" not in row["times"]:
            continue
        t = row["times"]["default"]
        if rule(f):
            wide = best_wide(row["times"], f["half"])
            # Not printed (a log with a small --top): at least the slowest printed time, flagged.
            t = row["times"][wide] if wide else max(row["times"].values())
            picks.append(wide or "unlisted")
        ratios.append((t / row["times"]["default"], f"{dtype} {shape}"))
    if not ratios:
        return "no rows"
    g = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    worst = max(ratios)
    losses = sum(r > 1.02 for r, _ in ratios)
    unlisted = picks.count("unlisted")
    return f"rows {len(ratios)} picked {len(picks)} ({unlisted} unlisted, counted at a lower bound) geomean {g:.3f} worst {worst[0]:.3f} ({worst[1]}) above 1.02: {losses}"


def main():
    logs = [parse(p) for p in sys.argv[1:]]
    for name, log in zip(sys.argv[1:], logs):
        print(f"== {name}")
        for rule_name, rule in RULES.items():
            print(f"  {rule_name:<32} {score(log, rule)}")


if __name__ == "__main__":
    main()
