"""A float32 simulation (numpy) of one thread's channels-last partial sweep on 1e4 + randn: the shifted sweep folded
with combine (k + d rounded first), with combine_offset, and the old two-sweep + merge per 8 rows; rms error of the mean
against float64 (benchmarks/NOTES.md, fourteenth session)."""
import numpy as np
f=np.float32
def two_sweep(v):
    s=f(0)
    for x in v: s=f(s+x)
    n=f(len(v)); inv=f(1)/n; m0=f(s*inv); d=f(0); q=f(0)
    for x in v:
        e=f(x-m0); d=f(d+e); q=f(q+f(e*e))
    m2=f(q-f(f(d*d)*inv)); return [f(m0+f(d*inv)), max(m2,f(0)), n]
def dbc(x,n):
    r=f(f(1)/n); q=f(x*r); return f(q+f(f(x-f(q*n))*r))
def comb(a,b):
    n=f(a[2]+b[2]); wb=dbc(b[2], n if n>1 else f(1)); dl=f(b[0]-a[0])
    return [f(a[0]+f(dl*wb)), f(f(a[1]+b[1])+f(f(f(a[2]*wb)*dl)*dl)), n]
def combo(a,dl,m2,nb):
    n=f(a[2]+nb); wb=dbc(nb,n)
    return [f(a[0]+f(dl*wb)), f(f(a[1]+m2)+f(f(f(a[2]*wb)*dl)*dl)), n]
def sweep(x, new):
    R=8; acc=two_sweep(x[:R]); k=acc[0]; i=R
    while i<len(x):
        blk=x[i:i+64]; i+=64; s1=f(0); s2=f(0)
        for v in blk:
            e=f(v-k); s1=f(s1+e); s2=f(s2+f(e*e))
        nb=f(len(blk)); inv=f(f(1)/nb); d=f(s1*inv); m2=max(f(s2-f(s1*d)),f(0))
        acc = combo(acc,d,m2,nb) if new else comb(acc,[f(k+d),m2,nb])
        k=acc[0]
    return acc
def old(x):
    acc=[f(0),f(0),f(0)]
    for i in range(0,len(x),8): acc=comb(acc,two_sweep(x[i:i+8]))
    return acc
rng=np.random.default_rng(1)
eo=[];en=[];eold=[]
for t in range(300):
    x=(1e4+rng.standard_normal(328)).astype(np.float32)
    true=x.astype(np.float64).mean()
    eo.append(abs(float(sweep(x,False)[0])-true)); en.append(abs(float(sweep(x,True)[0])-true)); eold.append(abs(float(old(x)[0])-true))
    
print("ulp(1e4)=",np.spacing(f(1e4)))
for name,e in (("shift+combine",eo),("shift+offset",en),("old two-sweep per 8",eold)):
    print(name, "rms mean err", np.sqrt(np.mean(np.square(e))), "max", max(e))
