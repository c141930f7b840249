# Kill a run with SIGKILL at random moments (10 times), resume it until it ends, and
# compare with an uninterrupted run of the same options: python3 scripts/kill_resume.py [BINARY]
import sys
import subprocess, random, time, json, os, shutil
B=sys.argv[1] if len(sys.argv) > 1 else 'target/debug/themisto'
args=['run','--limit','3','--max-new-tokens','16','--context-tokens','512','--quiet']
shutil.rmtree('whole',ignore_errors=True); shutil.rmtree('killed',ignore_errors=True)
t=time.time(); subprocess.run([B]+args+['--out','whole'],check=True,capture_output=True); base=time.time()-t
random.seed(1); kills=0
while True:
    p=subprocess.Popen([B]+args+['--out','killed','--resume'],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    if kills<10:
        try:
            p.wait(timeout=random.uniform(1.0, 6.0)); 
        except subprocess.TimeoutExpired:
            p.kill(); p.wait(); kills+=1; continue
    else:
        p.wait()
    if p.returncode==0: break
keys=['id','raw_prediction','prediction','scores','prompt_tokens','steps_kept','finish_reason','answer_kind']
A=[json.loads(l) for l in open('whole/samples.jsonl')]; Bk=[json.loads(l) for l in open('killed/samples.jsonl')]
ka=sorted([[r[k] for k in keys] for r in A],key=lambda x:x[0]); kb=sorted([[r[k] for k in keys] for r in Bk],key=lambda x:x[0])
ga=json.load(open('whole/results.json'))['groups']; gb=json.load(open('killed/results.json'))['groups']
print(f"uninterrupted {base:.1f}s; kills {kills}; records {len(A)} vs {len(Bk)}; equal {ka==kb}; groups equal {ga==gb}")
