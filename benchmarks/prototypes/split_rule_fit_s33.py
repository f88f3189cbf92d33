"""Twenty-ninth session: the split_forward rule fit on next_s33d.sh's grid (results_h200/s33/call2).
Run in that folder: python split_rule_fit_s33.py [""|--backward] [-v]. Per candidate rule over the shapes whose
default is a K = 8 stream plan: the picked rows' geomean of multi_cta / default, graph replay (g) and do_bench (b).
Resident clusters are the H200's (7 of 16, 16 of 8, 33 of 4, 66 of 2)."""
import re, math, sys
H = re.compile(r"(\w+) \(([\d, ]+)\) (forward|backward)\S* .*default=(\S+) floor=(\S+) ms")
R = re.compile(r"^\s+(\S+)\s+([\d.]+) ms")
def parse(path):
    rows, key = {}, None
    for line in open(path):
        h = H.match(line)
        if h: key=(h.group(1),tuple(int(v) for v in h.group(2).split(',')),h.group(3)); rows[key]={'plan':h.group(4),'floor':float(h.group(5))}; continue
        r = R.match(line)
        if r and key: rows[key][r.group(1)] = float(r.group(2))
    return rows
RES = {16: 7, 8: 16, 4: 33, 2: 66}
d = sys.argv[1] if len(sys.argv) > 1 else ""
g = parse(f"grid{d}--graph.txt"); b = parse(f"grid{d}.txt")
data = []
for k in g:
    plan = g[k]['plan']; m = re.match(r"stream\(CS=(\d+),S=(\d+)(?:,K=(\d+))?\)", plan)
    if not m: continue
    cs, st, kk = int(m.group(1)), int(m.group(2)), int(m.group(3) or 8)
    dt, shp = k[0], k[1]; I = shp[0]*shp[1]; HW = shp[2]*shp[3]; es = 4 if dt == 'float32' else 2
    vec = HW*es//16; slice_ = -(-vec//cs); v = slice_/512
    MB = I*HW*es/1e6
    data.append(dict(dt=dt, I=I, S=shp[2], cs=cs, st=st, k=kk, v=v, even=slice_%512==0, waves=I/RES[cs], MB=MB,
                     rg=g[k]['multi_cta']/g[k]['default'], rb=b[k]['multi_cta']/b[k]['default']))
rules = {
 'K8 uneven waves>1 MB<=40': lambda r: r['k']==8 and not r['even'] and r['waves']>1 and r['MB']<=40,
 'K8 waves>1 MB<=32': lambda r: r['k']==8 and r['waves']>1 and r['MB']<=32,
 'K8 waves>1 MB<=24': lambda r: r['k']==8 and r['waves']>1 and r['MB']<=24,
 'K8 uneven waves>1 MB<=24': lambda r: r['k']==8 and not r['even'] and r['waves']>1 and r['MB']<=24,
 'K8 uneven waves>=1.9 MB<=24': lambda r: r['k']==8 and not r['even'] and r['waves']>=1.9 and r['MB']<=24,
 'K8 v<6 waves>1': lambda r: r['k']==8 and r['v']<6 and r['waves']>1,
 'K8 uneven waves>1 waves<=5 MB<=40': lambda r: r['k']==8 and not r['even'] and 1<r['waves']<=5 and r['MB']<=40,
 'K8 waves>1 waves<=5 MB<=32': lambda r: r['k']==8 and 1<r['waves']<=5 and r['MB']<=32,
 'K8 waves>1.5 MB<=32 v>=4': lambda r: r['k']==8 and r['waves']>1.5 and r['MB']<=32 and r['v']>=4,
 'landed: K8 waves>1, v<5 fp32 / v<6 16-bit': lambda r: r['k']==8 and r['waves']>1 and r['v'] < (5 if r['dt']=='float32' else 6),
}
for name, f in rules.items():
    pick = [r for r in data if f(r)]
    if not pick: print(name, 'none'); continue
    gm = math.exp(sum(math.log(r['rg']) for r in pick)/len(pick)); bm = math.exp(sum(math.log(r['rb']) for r in pick)/len(pick))
    worst = max(pick, key=lambda r: max(r['rg'], r['rb']))
    print(f"{name:<40} n={len(pick):2d} g={gm:.3f} b={bm:.3f} worst {worst['dt'][:4]} I={worst['I']} S={worst['S']} {worst['rg']:.2f}/{worst['rb']:.2f}  losses(>1.02 either)={sum(1 for r in pick if max(r['rg'],r['rb'])>1.02)}")
if '-v' in sys.argv:
    for r in data: print(r)
