"""A CPU-bound Python program profiled by the real Pyroscope SDK (pyroscope-io),
pushing to the profiledb under test. Usage: pyroscope_app.py SERVER_URL SECONDS"""
import time, pyroscope, sys
pyroscope.configure(application_name="pyapp", server_address=sys.argv[1], sample_rate=100, tags={"env": "test"})
def busy_hash():
    x = 0
    for i in range(200000):
        x = (x * 31 + i) % 1000003
    return x
def busy_sort():
    return sorted([((i * 7919) % 10007) for i in range(20000)])
end = time.time() + float(sys.argv[2])
while time.time() < end:
    busy_hash(); busy_hash(); busy_sort()
pyroscope.shutdown()
