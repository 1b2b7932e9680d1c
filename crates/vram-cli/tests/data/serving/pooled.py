# Pools every round's unseen holdout half, as the capacity test prints it, into the four issue-35
# figures (weights within 1 %, KV pool median, concurrency median, outcomes as logged):
#   cargo test -p vram-cli --test capacity -- --nocapture --test-threads 1 > cap.txt
#   python3 crates/vram-cli/tests/data/serving/pooled.py cap.txt
# The pool is the KV column, else the tokens column; a -100 % pool (a start vram refuses) is left
# out of the median; an outcome counts where the starts column reads `same` or `WRONG`. Rows are
# read at the test's one-decimal print, so a median that falls between two rows prints as their mean.
import sys,re,statistics
lines=open(sys.argv[1]).read().splitlines()
names=['weights','KV pool','tokens','concurrency','starts','planner KV','planner conc']
W=[];KV=[];CC=[];OUT=[0,0]
i=0
while i<len(lines):
    l=lines[i]
    if l.startswith('holdout half') and 'CUDA graphs' not in l:
        hdr=lines[i+1]
        cols=sorted([(hdr.find(n),n) for n in names if hdr.find(n)>=0])
        cols=[n for _,n in cols]
        i+=2
        while i<len(lines) and lines[i].strip() and not lines[i].startswith('holdout'):
            t=lines[i].split()
            vals=dict(zip(cols,t[1:1+len(cols)]))
            pct=lambda v: None if v in (None,'-') else float(v.rstrip('%'))
            w=pct(vals.get('weights'))
            if w is not None: W.append(abs(w))
            pool=pct(vals.get('KV pool'))
            if pool is None: pool=pct(vals.get('tokens'))
            if pool is not None and pool>-100: KV.append(abs(pool))
            c=pct(vals.get('concurrency'))
            if c is not None: CC.append(abs(c))
            s=vals.get('starts')
            if s in('same','WRONG'): OUT[1]+=1; OUT[0]+= s=='same'
            i+=1
        continue
    i+=1
print(f"weights within 1%: {sum(x<=1.0 for x in W)} of {len(W)}")
print(f"KV pool median {statistics.median(KV):.2f}% over {len(KV)}")
print(f"concurrency median {statistics.median(CC):.2f}% over {len(CC)}")
print(f"outcomes {OUT[0]} of {OUT[1]}")
