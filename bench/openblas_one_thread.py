import numpy as np,time,sys,os,threading
from threadpoolctl import ThreadpoolController
mode=sys.argv[1]
if "prime" in mode:
    a=np.ones((256,256),np.float32); a@a
if "limit" in mode:
    ThreadpoolController().limit(limits=1, user_api="blas")
def work(reps=300):
    a=np.random.rand(256,256).astype(np.float32); b=a.copy()
    for _ in range(reps): a@b
for k in (1,2):
    s=time.perf_counter(); c=os.times()
    ts=[threading.Thread(target=work) for _ in range(k)]
    [t.start() for t in ts]; [t.join() for t in ts]
    c2=os.times(); w=time.perf_counter()-s
    print(mode, k, "callers: us/op", round(w/(300*k)*1e6), "cpu/wall", round((c2.user-c.user)/w,2))
