"""Sample the resident memory of a command's process tree every 0.25 s (processes over 300 MB): seconds, pid,
RSS MiB, command; the peak per pid at the end.  .venv/bin/python rsslog.py OUT.tsv -- command ..."""
import subprocess
import sys
import time

import psutil

out = open(sys.argv[1], "w")
cmd = sys.argv[sys.argv.index("--") + 1:]
t0 = time.time()
p = subprocess.Popen(cmd)
root = psutil.Process(p.pid)
peak = {}
while p.poll() is None:
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = []
    for q in procs:
        try:
            rss = q.memory_info().rss / 2**20
            c = " ".join(q.cmdline()[1:4])[:80]
        except psutil.Error:
            continue
        if rss > 300:
            out.write(f"{time.time()-t0:.2f}\t{q.pid}\t{rss:.0f}\t{c}\n")
            peak[q.pid] = max(peak.get(q.pid, 0), rss)
    out.flush()
    time.sleep(0.25)
for k, v in peak.items():
    out.write(f"# peak {k} {v:.0f}\n")
sys.exit(p.returncode)
